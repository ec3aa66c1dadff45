-- wrk script for bench/overhead.py: POST the chat body with an API key, then print one parseable line.
-- BENCH_BODY_FILE names the file holding the JSON body; BENCH_API_KEY is sent as a Bearer token.
-- BENCH_MIX (optional, the soak): "PATH=FILE,PATH=FILE,..."; requests cycle through these paths and bodies.

local function read(name)
  local file = assert(io.open(name, "rb"))
  local body = file:read("*a")
  file:close()
  return body
end

wrk.method = "POST"
wrk.body = read(os.getenv("BENCH_BODY_FILE"))
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_API_KEY")

local mix = os.getenv("BENCH_MIX")
if mix and mix ~= "" then
  local requests, turn = {}, 0
  -- Built in init, once wrk knows the host: wrk.format adds the Host header only then.
  function init(args)
    for path, name in string.gmatch(mix, "([^=,]+)=([^,]+)") do
      requests[#requests + 1] = wrk.format("POST", path, nil, read(name))
    end
  end
  function request()
    turn = turn % #requests + 1
    return requests[turn]
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d status=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
