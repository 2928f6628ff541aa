#!/usr/bin/env python3
"""Self (exclusive) instruction counts per function and per object file from a callgrind output file.

    scripts/callgrind-self.py FILE[,FILE...] [TOP] [MESSAGES]

Several files (comma-separated: one per thread, from --separate-threads=yes) are added together.

callgrind_annotate 3.19 attributes every instruction to `clone` when asked for exclusive costs of these files, so
this reads the format itself: cost lines after `fn=` are the function's own cost; the cost line after `calls=`
is the inclusive cost of a call and is skipped. Names are demangled with `swift demangle --simplified` when
the toolchain is on PATH. With MESSAGES, figures are also given per message. Also counts the calls made to
malloc, free, swift_allocObject, swift_retain, swift_release, swift_task_create, the read / write / pwrite64 / fsync /
fdatasync system call wrappers, sqlite3_step and the condition variables' signal and wait (a recursive call of a
function to itself is not counted).
"""
import collections
import re
import shutil
import subprocess
import sys

paths = sys.argv[1].split(",")
top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
messages = int(sys.argv[3]) if len(sys.argv) > 3 else 0

self_cost = collections.Counter()
function_object = {}
# Calls counted per callee name (for malloc, retain and friends).
call_counts = collections.Counter()
counted = {"malloc", "free", "swift_allocObject", "swift_retain", "swift_release", "swift_task_create", "write", "__GI___libc_write", "writev", "read",
           "fsync", "fdatasync", "pwrite64", "sqlite3_step", "pthread_cond_signal", "pthread_cond_wait"}
compressed = re.compile(r"\((\d+)\)(?:\s+(.*))?")


def define(table, text):
    match = compressed.match(text)
    if not match:
        return text
    key, name = match.group(1), match.group(2)
    if name is not None:
        table[key] = name
    return table.get(key, key)


def read(path):
    """Adds one file's costs (its compressed names are its own)."""
    names, objects = {}, {}
    current = current_object = callee = None
    skip_next = False
    with open(path, errors="replace") as file:
        for line in file:
            if line.startswith("fn="):
                current = define(names, line[3:].strip())
                function_object[current] = current_object
            elif line.startswith("ob="):
                current_object = define(objects, line[3:].strip())
            elif line.startswith("cob="):
                define(objects, line[4:].strip())
            elif line.startswith("cfn="):
                callee = define(names, line[4:].strip())
            elif line.startswith("calls="):
                skip_next = True
                if callee in counted and current != callee:
                    call_counts[callee] += int(line[6:].split()[0])
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                fields = line.split()
                # The position, then the events' costs in order: instructions (Ir) first, also when the cache
                # simulation adds columns after it.
                if len(fields) >= 2 and current is not None:
                    self_cost[current] += int(fields[1])


for path in paths:
    read(path)

total = sum(self_cost.values())
ranked = self_cost.most_common(top)
demangled = {}
swift = shutil.which("swift-demangle") or shutil.which("swift")
if swift:
    command = [swift, "--simplified"] if swift.endswith("swift-demangle") else [swift, "demangle", "--simplified"]
    mangled = [name for name, _ in ranked]
    try:
        output = subprocess.run(command, input="\n".join(mangled), capture_output=True, text=True, check=True).stdout
        demangled = dict(zip(mangled, output.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        pass


def per_message(cost):
    return f"{cost / messages:10.0f}" if messages else ""


print(f"total {total:,} instructions" + (f", {total / messages:,.0f} per message" if messages else ""))
print(f"{'self':>14} {'%':>6} {'per msg' if messages else '':>10}  function [object]")
for name, cost in ranked:
    obj = (function_object.get(name) or "?").rsplit("/", 1)[-1]
    label = demangled.get(name, name)
    if len(label) > 140:
        label = label[:137] + "..."
    print(f"{cost:14,} {100 * cost / total:5.1f}% {per_message(cost)}  {label} [{obj}]")

if call_counts:
    print("calls" + (" per message" if messages else "") + ": " + ", ".join(
        f"{name} {count / messages:.2f}" if messages else f"{name} {count}" for name, count in sorted(call_counts.items())))

by_object = collections.Counter()
for name, cost in self_cost.items():
    by_object[(function_object.get(name) or "?").rsplit("/", 1)[-1]] += cost
print("by object file:")
for obj, cost in by_object.most_common(10):
    print(f"{cost:14,} {100 * cost / total:5.1f}% {per_message(cost)}  {obj}")
