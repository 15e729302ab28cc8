"""The incident simulator behind fixtures/ and the demo.

``SCENARIOS`` maps a scenario name to its :class:`Scenario` (``.description``);
``simulate()`` writes a journal (export + json) and ``expected.json``; ``simulate_plain()``
writes the same incident as plain per-unit SGLang log files;
``remote.write_journal_remote()`` turns a journal.export into a journal-remote collection
(``remote-<host>.journal`` per host, made by the real ``systemd-journal-remote``).
"""

from pdforensics.simulate.run import simulate, simulate_plain
from pdforensics.simulate.scenarios import SCENARIOS, Scenario

__all__ = ["SCENARIOS", "Scenario", "simulate", "simulate_plain"]
