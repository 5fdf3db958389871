-- wrk script for bench/ingest_bench.py: send pre-signed requests, each once, in order.
--
-- The file named by the first script argument holds complete HTTP requests separated
-- by NUL bytes (bench/wrk_load.py writes it). Every request is a distinct, correctly
-- signed delivery, so replaying one would measure the duplicate path instead of a
-- write: when the list runs out the script starts over and `done` reports how often.

local requests = {}
local next_index = 1
wraps = 0  -- global: `done` reads it from the thread with thread:get
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
end

function init(args)
  local file = assert(io.open(args[1], "rb"))
  local data = file:read("*a")
  file:close()
  for raw in string.gmatch(data, "([^%z]+)") do
    requests[#requests + 1] = raw
  end
end

function request()
  local raw = requests[next_index]
  next_index = next_index + 1
  if next_index > #requests then
    next_index = 1
    wraps = wraps + 1
  end
  return raw
end

function done(summary, latency, requests_done)
  local wrapped = 0
  for _, thread in ipairs(threads) do
    wrapped = wrapped + thread:get("wraps")
  end
  -- One machine-readable line; latencies in microseconds.
  io.write(string.format(
    "PAYSTREAM_WRK requests=%d duration_us=%d status_errors=%d connect=%d read=%d" ..
    " write=%d timeout=%d p50_us=%d p99_us=%d wraps=%d\n",
    summary.requests, summary.duration, summary.errors.status, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), wrapped))
end
