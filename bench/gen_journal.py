"""Generate realistic journald entries (Journal Export Format) for the source-reader benchmarks.

    python bench/gen_journal.py N OUT.export        # then:
    /lib/systemd/systemd-journal-remote -o OUT.journal - < OUT.export

Entries carry the ~25 fields journald really stores for a service's stderr line, so reader
throughput figures are comparable to a production journal.
"""

from __future__ import annotations

import sys

T0 = 1_764_410_000_000_000
BOOT = "0123456789abcdef0123456789abcdef"
UNITS = ("sglang-prefill.service", "sglang-decode.service", "sglang-router.service", "sshd.service")


def entry(i: int) -> str:
    unit = UNITS[i % len(UNITS)]
    pid = 1000 + i % 4
    msg = (
        f"[2026-11-29 10:{i // 60 % 60:02d}:{i % 60:02d} DP0 TP{i % 8}] Prefill batch, #new-seq: {i % 7}, "
        f"#new-token: {i % 8192}, #cached-token: 0, token usage: 0.{i % 100:02d}, #running-req: 1, "
        f"#queue-req: 0, #bootstrap-req: 0, #inflight-req: {i % 3}, input throughput (token/s): 2103.55"
    )
    return (
        f"__REALTIME_TIMESTAMP={T0 + i * 1000}\n__MONOTONIC_TIMESTAMP={5_000_000 + i * 1000}\n"
        f"_BOOT_ID={BOOT}\n_MACHINE_ID=fedcba9876543210fedcba9876543210\n_HOSTNAME=gpu-node-{i % 2}\n"
        f"_TRANSPORT=stdout\nPRIORITY=6\nSYSLOG_FACILITY=3\nSYSLOG_IDENTIFIER=python3\n_UID=0\n_GID=0\n"
        f"_COMM=python3\n_EXE=/usr/bin/python3.11\n_CMDLINE=python3 -m sglang.launch_server --port 30000\n"
        f"_CAP_EFFECTIVE=1ffffffffff\n_SELINUX_CONTEXT=unconfined\n_SYSTEMD_CGROUP=/system.slice/{unit}\n"
        f"_SYSTEMD_UNIT={unit}\n_SYSTEMD_SLICE=system.slice\n"
        f"_SYSTEMD_INVOCATION_ID=aaaabbbbccccddddeeeeffff0000{i % 4:04d}\n_STREAM_ID=abcdef{i % 4}\n"
        f"_PID={pid}\nMESSAGE={msg}\n"
    )


def main() -> None:
    n, out = int(sys.argv[1]), sys.argv[2]
    with open(out, "w") as f:
        for i in range(n):
            f.write(entry(i))
            f.write("\n")


if __name__ == "__main__":
    main()
