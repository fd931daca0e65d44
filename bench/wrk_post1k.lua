-- wrk script for bench/e2e_delivery.sh: POSTs the same kind of request ringcast sends to a
-- webhook receiver (a JSON body of BODY_BYTES bytes, default 1024, with Standard Webhooks
-- headers of realistic lengths), so that the sink does the same work for both peers.
-- The signature is a constant: the sink runs with --verify none in the benchmark.
local n = tonumber(os.getenv("BODY_BYTES") or "1024")
local head = '{"n":1,"data":"'
local tail = '"}'
local fill = n - #head - #tail
if fill < 0 then fill = 0 end

wrk.method = "POST"
wrk.body = head .. string.rep("x", fill) .. tail
wrk.headers["User-Agent"] = os.getenv("BENCH_USER_AGENT") or "ringcast/0.1.0"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["webhook-id"] = "deliv-1-12345"
wrk.headers["webhook-timestamp"] = "1764500000"
wrk.headers["webhook-signature"] = "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="
