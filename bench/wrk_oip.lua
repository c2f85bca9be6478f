-- wrk_oip.lua: wrk's requests for bench/serve.sh: POST /v2/models/facegen/infer of IMAGES fresh seeds
-- (64 by default) as a binary UINT64 tensor, the output asked for as binary too (the protocol's
-- binary tensor data extension); done() prints the line bench/serve.sh reads (see wrk_generate.lua).
local images = tonumber(os.getenv("IMAGES") or "64")
local next_seed = 0
local head = '{"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [' .. images ..
             '], "parameters": {"binary_data_size": ' .. (8 * images) .. '}}], "parameters": {"binary_data_output": true}}'

function setup(thread)
  thread:set("first", #wrk_threads * 1000000000)
  wrk_threads[#wrk_threads + 1] = thread
end
wrk_threads = {}

function init()
  next_seed = first or 0
end

-- x (below 2^53) as 8 little-endian bytes.
local function uint64(x)
  local bytes = {}
  for i = 1, 8 do
    bytes[i] = string.char(x % 256)
    x = math.floor(x / 256)
  end
  return table.concat(bytes)
end

function request()
  local seeds = {}
  for i = 1, images do seeds[i] = uint64(next_seed + i - 1) end
  next_seed = next_seed + images
  return wrk.format("POST", "/v2/models/facegen/infer", {["Inference-Header-Content-Length"] = tostring(#head)},
                    head .. table.concat(seeds))
end

function done(summary, latency, requests)
  io.write(string.format("WRK requests %d non2xx %d errors %d p50_us %d p99_us %d duration_us %d\n", summary.requests,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), summary.duration))
end
