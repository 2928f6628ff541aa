#!/usr/bin/env python3
"""Who calls what, from a callgrind output file: the questions callgrind-self.py's flat table leaves open.

    scripts/callgrind-calls.py inclusive FILE [MESSAGES] [TOP] [MATCH]   # functions by inclusive instructions
    scripts/callgrind-calls.py callers FILE NAME [MESSAGES] [TOP]        # who calls the functions named NAME
    scripts/callgrind-calls.py callees FILE NAME [MESSAGES] [TOP]        # what the functions named NAME call

FILE is one thread's file (scripts/profile-callgrind keeps <server>.callgrind.1-NN, one per thread). NAME matches a
function's symbol as the file names it (mangled, for Swift: `InboxRecordVWOc`, `swift_retain`), as a substring;
MATCH filters `inclusive` by a substring of the demangled name. With MESSAGES (4000 for profile-callgrind's default
run), every figure is divided by it: instructions and calls per message.

- `inclusive`: a function's own instructions and those of the calls it makes, one level of recursion left out (a
  call of a function to itself is not added to it again). What a step of the message's way costs with all it calls.
- `callers`: for each caller, the calls it made to NAME and their inclusive instructions. Where retains and copies
  come from: `callers FILE swift_retain`, then `callers FILE <the outlined copy it names>`.
- `callees`: the function's own instructions, then each function it calls with the calls and inclusive instructions.

callgrind_annotate 3.19 cannot give these for the per-thread files of a Swift binary (it attributes everything to
`clone`), so the format is read here: `fn=` names the function whose lines follow, `cfn=` the callee of the next
`calls=` line, and the cost line after `calls=` is that call's inclusive cost. Names are demangled with
`swift demangle --simplified --compact` when the toolchain is on PATH.
"""
import collections
import re
import shutil
import subprocess
import sys

COMPRESSED = re.compile(r"\((\d+)\)(?:\s+(.*))?")


def read(path):
    """Yields (function, callee or None, calls, instructions) for every cost line of the file."""
    names = {}

    def define(text):
        match = COMPRESSED.match(text)
        if not match:
            return text
        key, name = match.group(1), match.group(2)
        if name is not None:
            names[key] = name
        return names.get(key, text)

    function = callee = None
    calls = None
    with open(path, errors="replace") as file:
        for line in file:
            line = line.rstrip("\n")
            if line.startswith("fn="):
                function = define(line[3:])
            elif line.startswith("cfn="):
                callee = define(line[4:])
            elif line.startswith("calls="):
                calls = int(line[6:].split()[0])
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if function is not None and len(parts) > 1:
                    if calls is not None:
                        yield function, callee, calls, int(parts[1])
                    else:
                        yield function, None, 0, int(parts[1])
                calls = None


def demangled(symbols):
    if not symbols or not shutil.which("swift"):
        return list(symbols)
    result = subprocess.run(["swift", "demangle", "--simplified", "--compact"], input="\n".join(symbols),
                            capture_output=True, text=True)
    lines = result.stdout.split("\n")
    return lines[:len(symbols)] if len(lines) >= len(symbols) else list(symbols)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("inclusive", "callers", "callees"):
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    mode, path = sys.argv[1], sys.argv[2]
    rest = sys.argv[3:]
    name = None
    if mode != "inclusive":
        if not rest:
            print(f"{mode} needs a NAME", file=sys.stderr)
            sys.exit(2)
        name, rest = rest[0], rest[1:]
    messages = int(rest[0]) if len(rest) > 0 else 1
    top = int(rest[1]) if len(rest) > 1 else 40
    match = rest[2] if len(rest) > 2 and mode == "inclusive" else None
    unit = "a message" if messages > 1 else "in all"

    own = collections.Counter()
    inclusive = collections.Counter()
    calls = collections.Counter()
    for function, callee, count, cost in read(path):
        if mode == "inclusive":
            if callee is None:
                own[function] += cost
                inclusive[function] += cost
            elif callee != function:
                inclusive[function] += cost
        elif mode == "callers":
            if callee is not None and name in callee:
                calls[function] += count
                inclusive[function] += cost
        elif name in function:
            if callee is None:
                own["(own)"] += cost
            else:
                calls[callee] += count
                inclusive[callee] += cost

    if mode == "inclusive":
        ranked = inclusive.most_common()
        shown = 0
        print(f"{'inclusive':>12} {'own':>10}  function (instructions {unit})")
        for (symbol, cost), label in zip(ranked, demangled([symbol for symbol, _ in ranked[:5000]])):
            if match and match not in label:
                continue
            print(f"{cost / messages:12.0f} {own[symbol] / messages:10.0f}  {label[:160]}")
            shown += 1
            if shown >= top:
                break
        return
    if mode == "callees":
        print(f"own instructions {unit}: {own['(own)'] / messages:.0f}")
    ranked = inclusive.most_common(top)
    print(f"{'calls':>10} {'inclusive':>12}  {'caller' if mode == 'callers' else 'callee'} ({unit})")
    for (symbol, cost), label in zip(ranked, demangled([symbol for symbol, _ in ranked])):
        print(f"{calls[symbol] / messages:10.2f} {cost / messages:12.0f}  {label[:160]}")


if __name__ == "__main__":
    main()
