-- wrk_png.lua: wrk's requests for bench/serve.sh: GET /v1/images/SEED.png, a fresh seed each request
-- (each thread its own); done() prints the line bench/serve.sh reads (see wrk_generate.lua).
local next_seed = 0

function setup(thread)
  thread:set("first", #wrk_threads * 1000000000)
  wrk_threads[#wrk_threads + 1] = thread
end
wrk_threads = {}

function init()
  next_seed = first or 0
end

function request()
  next_seed = next_seed + 1
  return wrk.format("GET", "/v1/images/" .. tostring(next_seed) .. ".png")
end

function done(summary, latency, requests)
  io.write(string.format("WRK requests %d non2xx %d errors %d p50_us %d p99_us %d duration_us %d\n", summary.requests,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), summary.duration))
end
