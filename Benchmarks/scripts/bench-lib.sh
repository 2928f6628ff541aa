# The pieces the network benchmark scripts share (scripts/peers, http-vs-hummingbird, socket-vs-nio, profile-perf,
# profile-callgrind). Source it from a script in scripts/ after `set -euo pipefail`:
#
#   source "$(dirname "$0")/bench-lib.sh"
#   bench_own_session "$0" "$@"     # first: with NICE, re-runs the script in a session of its own
#   bench_build HeraldServer ...    # builds the products in release (unless NO_BUILD=1) and sets BIN
#
# Environment it reads: NICE, PIN (1), SERVER_CPU (0), CLIENT_CPU (1), SCRATCH (.build-bench), NO_BUILD.

# With NICE, run in a session of our own and give its scheduler autogroup that niceness: with autogroups on
# (/proc/sys/kernel/sched_autogroup_enabled), CPU time is shared between sessions first, so a plain `nice` of our
# processes would not weigh against other sessions' builds. Call it with "$0" "$@"; it also moves to Benchmarks/.
bench_own_session() {
    local script=$1
    shift
    if [[ -n "${NICE:-}" && -z "${BENCH_OWN_SESSION:-}" ]]; then
        export BENCH_OWN_SESSION=1
        exec setsid --wait "$script" "$@"
    fi
    if [[ -n "${NICE:-}" && -w /proc/$$/autogroup ]]; then echo "$NICE" >"/proc/$$/autogroup"; fi
    cd "$(dirname "$script")/.."
}

PIN=${PIN:-1}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
SCRATCH=${SCRATCH:-.build-bench}
export PATH=/opt/swift/usr/bin:$PATH

# Command prefixes: servers run on CPU $SERVER_CPU and load generators on CPU $CLIENT_CPU (PIN=1), with NICE.
server_prefix=()
client_prefix=()
if [[ -n "${NICE:-}" ]]; then
    server_prefix=(nice -n "$NICE")
    client_prefix=(nice -n "$NICE")
fi
if [[ "$PIN" == 1 ]]; then
    server_prefix+=(taskset -c "$SERVER_CPU")
    client_prefix+=(taskset -c "$CLIENT_CPU")
fi
bench_pinning() { [[ $PIN == 1 ]] && echo "servers on CPU $SERVER_CPU, load on CPU $CLIENT_CPU" || echo none; }

# bench_build PRODUCT...: builds them in release into $SCRATCH (unless NO_BUILD=1) and sets BIN.
bench_build() {
    if [[ "${NO_BUILD:-0}" != 1 ]]; then
        local product
        for product in "$@"; do
            swift build -c release --scratch-path "$SCRATCH" --product "$product" 2>&1 | tail -1
        done
    fi
    BIN=$(swift build -c release --scratch-path "$SCRATCH" --show-bin-path)
}

# wait_ready LOG PID [TRIES] [INTERVAL] [PATTERN]: waits for the server's `ready` line (a line matching PATTERN);
# exits when it dies or never says it.
wait_ready() {
    local tries=${3:-200} interval=${4:-0.05} pattern=${5:-^ready}
    for _ in $(seq 1 "$tries"); do
        grep -q "$pattern" "$1" 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || { echo "server exited:"; cat "$1"; exit 1; }
        sleep "$interval"
    done
    echo "server not ready:"; cat "$1"; exit 1
}

# cpu_us PID: CPU time of all of a process's threads, in µs (schedstat: nanoseconds on the CPU, per thread; finer
# than the 10 ms ticks of /proc/PID/stat).
cpu_us() { cat /proc/"$1"/task/*/schedstat | awk '{ sum += $1 } END { printf "%d\n", sum / 1000 }'; }

# cpu_snapshot PID: the process's CPU time as "TICKS TID=NS TID=NS ...": utime + stime from /proc/PID/stat (in clock
# ticks; it keeps the time of threads that have exited) and each live thread's schedstat (nanoseconds).
cpu_snapshot() {
    local task
    awk '{ sub(/^.*\) /, ""); printf "%d", $12 + $13 }' "/proc/$1/stat"
    for task in /proc/"$1"/task/*; do
        printf ' %s=%s' "${task##*/}" "$(cut -d' ' -f1 "$task/schedstat" 2>/dev/null || echo 0)"
    done
    echo
}

# cpu_used_us BEFORE AFTER: µs of CPU between two cpu_snapshot's. The threads' schedstat is exact but loses a thread
# that exited in between (Swift concurrency's and NIO's pools let idle threads go); /proc/PID/stat keeps them but
# counts 10 ms ticks. The first is used unless the second is larger by more than 2 ticks.
cpu_used_us() {
    awk -v before="$1" -v after="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN {
        nb = split(before, b, " "); na = split(after, a, " ")
        for (i = 2; i <= nb; i++) { split(b[i], kv, "="); start[kv[1]] = kv[2] }
        for (i = 2; i <= na; i++) { split(a[i], kv, "="); exact += kv[2] - ((kv[1] in start) ? start[kv[1]] : 0) }
        exact /= 1000
        coarse = (a[1] - b[1]) * 1e6 / hz
        printf "%d\n", (coarse - exact > 2 * 1e6 / hz) ? coarse : exact
    }'
}

# settle PID: waits (at most 5 s) until the process uses less than 5 % of a CPU over 100 ms, so that work it still
# does after a run (a durable inbox's commits, say) does not land in the next server's run on the same CPU.
settle() {
    local before after
    for _ in $(seq 1 50); do
        before=$(cpu_snapshot "$1")
        sleep 0.1
        after=$(cpu_snapshot "$1")
        (( $(cpu_used_us "$before" "$after") < 5000 )) && return 0
    done
}

# rss_kib PID: resident memory (VmRSS) in KiB.
rss_kib() { awk '/^VmRSS:/ { print $2 }' /proc/"$1"/status; }

# handled LOG PID: asks the server (SIGUSR1) for its handler count and prints it.
handled() {
    local before
    before=$(grep -c '^handled=' "$1" || true)
    kill -USR1 "$2"
    for _ in $(seq 1 100); do
        (( $(grep -c '^handled=' "$1" || true) > before )) && break
        sleep 0.02
    done
    sed -n 's/^handled=//p' "$1" | tail -1
}

# median: of the numbers on standard input, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# http_request TOKEN: the raw HTTP/1.1 request wrk sends (scripts/post.lua), for SocketLoad --tcp.
http_request() {
    local body
    body=$(sed "s/REPLACE_WITH_TOKEN/$1/" scripts/fcm-send-body.json)
    printf 'POST /v1/projects/herald/messages:send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
        "${#body}" "$body"
}

bench_machine() {
    echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
}
