"""One module per export format; `pdforensics.export.export` chooses among them."""
