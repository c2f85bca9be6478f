-- wrk_generate.lua: wrk's requests for bench/serve.sh: POST /v1/generate of IMAGES fresh seeds in
-- FORMAT (environment; 64 and npy-u8 by default), each thread its own seeds; done() prints one
-- line for the script: requests, non-2xx answers, socket errors, latency p50 and p99 in microseconds.
local images = tonumber(os.getenv("IMAGES") or "64")
local format = os.getenv("FORMAT") or "npy-u8"
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
  local seeds = {}
  for i = 1, images do seeds[i] = tostring(next_seed + i - 1) end
  next_seed = next_seed + images
  return wrk.format("POST", "/v1/generate", {["Content-Type"] = "application/json"},
                    '{"seeds": [' .. table.concat(seeds, ",") .. '], "format": "' .. format .. '"}')
end

function done(summary, latency, requests)
  io.write(string.format("WRK requests %d non2xx %d errors %d p50_us %d p99_us %d duration_us %d\n", summary.requests,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), summary.duration))
end
