#!/usr/bin/python3
"""thread_times.py [--json FILE] CMD...: runs CMD and says where its CPU time went, by thread name.

Every 20 ms it reads /proc/PID/task/*/stat of CMD's process (utime, stime and the name each thread
was given: facegen-pool, the main thread facegen, CUDA's own), keeping each thread's last reading;
after CMD ends it prints the wall time, the CPU time of CMD and everything it waited for (getrusage
of the children: exact, threads that ended between samples included), and the user and system
seconds of each thread name (the samples: a thread's last 20 ms may be missing). With --json, the
same figures go to FILE for scripts (bench/job_profile.sh). For machines without perf or hardware
events: it needs only /proc. Exit status: CMD's.
"""
import json
import os
import resource
import subprocess
import sys
import time


def main(argv):
    json_path = None
    if len(argv) > 2 and argv[1] == "--json":
        json_path, argv = argv[2], argv[2:]
    command = argv[1:]
    if not command:
        sys.exit(__doc__)
    hz = os.sysconf("SC_CLK_TCK")
    start = time.perf_counter()
    child = subprocess.Popen(command)
    threads = {}  # tid: [name, user ticks, system ticks]
    while child.poll() is None:
        try:
            tids = os.listdir(f"/proc/{child.pid}/task")
        except OSError:
            tids = []
        for tid in tids:
            try:
                with open(f"/proc/{child.pid}/task/{tid}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            name = text[text.index("(") + 1:text.rindex(")")]
            fields = text[text.rindex(")") + 2:].split()
            threads[tid] = [name, int(fields[11]), int(fields[12])]  # utime, stime: fields 14, 15 of stat
        time.sleep(0.02)
    wall = time.perf_counter() - start
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_name = {}
    for name, user, system in threads.values():
        group = by_name.setdefault(name, {"threads": 0, "user_seconds": 0.0, "system_seconds": 0.0})
        group["threads"] += 1
        group["user_seconds"] += user / hz
        group["system_seconds"] += system / hz
    result = {"command": command, "exit_status": child.returncode, "wall_seconds": wall,
              "user_seconds": used.ru_utime, "system_seconds": used.ru_stime, "by_thread_name": by_name}
    print(f"thread_times: exit {child.returncode}, wall {wall:.2f} s, user {used.ru_utime:.2f} s, system "
          f"{used.ru_stime:.2f} s ({(used.ru_utime + used.ru_stime) / max(wall, 1e-9):.1f} cores busy), "
          f"{len(threads)} threads")
    for name, group in sorted(by_name.items(), key=lambda item: -(item[1]["user_seconds"] + item[1]["system_seconds"])):
        if group["user_seconds"] + group["system_seconds"] < 0.01:
            continue
        print(f"  {name:<16} x{group['threads']:<3} user {group['user_seconds']:7.2f} s  system "
              f"{group['system_seconds']:7.2f} s")
    if json_path:
        with open(json_path, "w") as out:
            json.dump(result, out, indent=2)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
