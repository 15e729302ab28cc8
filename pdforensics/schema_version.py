"""The database schema's version, apart from `schema.py` so that opening a database for reading
(`store.open_db`) does not import polars. `schema.SCHEMA_VERSION` is this value: bump it here."""

SCHEMA_VERSION = 5
