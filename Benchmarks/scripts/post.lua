-- wrk script of scripts/http-vs-hummingbird: POSTs the body in $BODY_FILE on every request (keep-alive) and
-- prints one machine-readable line at the end.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.body = file:read("*a")
file:close()

done = function(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local errors = summary.errors
  io.write(string.format(
    "RESULT requests=%d seconds=%.3f rps=%.0f p50_us=%d p99_us=%d max_us=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, seconds, summary.requests / seconds, latency:percentile(50), latency:percentile(99), latency.max,
    errors.connect, errors.read, errors.write, errors.status, errors.timeout))
end
