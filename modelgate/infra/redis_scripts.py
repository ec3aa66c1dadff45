"""The Lua scripts of the Redis counters (`domain.redis_counters`): each runs atomically in Redis.

On the request path one script, `ADMIT_REQUEST`, claims the request id, counts every rate window and reserves
every money counter, all or nothing. After the request, `COMPLETE` applies a whole batch of TPM corrections,
settlements and claim releases of this process in one call. The others serve the rare paths (a counter
built from the database, balance events, dead-process reclaim, realtime slots, settlement retries).
"""

# Money hashes: b = balance, r = reserved, a = activated, cs = last balance event folded in, e<seq> = an
# event above cs already applied. Amounts reach Redis as the decimal strings Python sent (HINCRBY with
# ARGV), never as Lua numbers, so no "-0" and no exponent notation.
# Each process also keeps its own share of `r` in p:<process>, and names the hashes it reserved in
# `held:<process>`, so the reservations of a process that died (its `live:<process>` key expired) are
# released by the others (`_RECLAIM`) instead of being held forever.
RESERVE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if ARGV[2] == '1' and redis.call('HGET', KEYS[1], 'a') ~= '1' then return -1 end
local b = tonumber(redis.call('HGET', KEYS[1], 'b'))
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
if b + tonumber(ARGV[3]) - r < tonumber(ARGV[1]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'r', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'p:' .. ARGV[4], ARGV[1])
redis.call('SADD', KEYS[2], KEYS[1])
return 1
"""
# KEYS[2] holds events announced while no counter existed (it may have been being built): fold them in.
INIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'b', ARGV[1], 'r', 0, 'a', ARGV[2], 'cs', ARGV[3])
  local early = redis.call('HGETALL', KEYS[2])
  for i = 1, #early, 2 do
    local seq = tonumber(early[i])
    if seq > tonumber(ARGV[3]) and redis.call('HSETNX', KEYS[1], 'e' .. early[i], 1) == 1 then
      local amount, activates = string.match(early[i + 1], '^(-?%d+)|(%d)$')
      redis.call('HINCRBY', KEYS[1], 'b', amount)
      if activates == '1' then redis.call('HSET', KEYS[1], 'a', 1) end
    end
  end
end
return 1
"""
# KEYS[1] = holds:<process>, ARGV[1] = a hash tag of its held sets (a script, so it goes on the lean wire).
HOLDING = "return redis.call('SADD', KEYS[1], ARGV[1])"
# KEYS[1] = held:<dead process>; ARGV[1] = the dead process. Releases what it still held, everywhere.
RECLAIM = """
local mine = 'p:' .. ARGV[1]
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local held = tonumber(redis.call('HGET', name, mine) or '0')
  if held ~= 0 then redis.call('HINCRBY', name, 'r', string.format('%d', -held)) end
  redis.call('HDEL', name, mine)
end
redis.call('DEL', KEYS[1])
return 1
"""
APPLY = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. '|' .. ARGV[3])
  redis.call('EXPIRE', KEYS[2], 600)
  return 0
end
if tonumber(ARGV[1]) <= tonumber(redis.call('HGET', KEYS[1], 'cs') or '0') then return 0 end
if redis.call('HSETNX', KEYS[1], 'e' .. ARGV[1], 1) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'b', ARGV[2])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'a', 1) end
return 1
"""
# Rate windows (hashes under `w:`): one field per second taken in, plus 't', the total of the live ones, and
# 'o', the oldest live second. A request reads the two; the buckets are scanned (and the expired ones
# dropped) only once 'o' has left the window: about once a second per window under load, not per request.
# A bucket's first take in its second renews the hash's expiry, so an idle window vanishes by itself.
_WINDOWS = """
local function window_use(key, now, window)
  local state = redis.call('HMGET', key, 't', 'o')
  local total, oldest = tonumber(state[1]), tonumber(state[2])
  if total ~= nil and (oldest == nil or oldest > now - window) then return total, oldest end
  local fields = redis.call('HGETALL', key)
  if #fields == 0 then return 0, nil end
  total, oldest = 0, nil
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name ~= 't' and name ~= 'o' then
      local second = tonumber(name)
      if second <= now - window then
        redis.call('HDEL', key, name)
      else
        total = total + tonumber(fields[i + 1])
        if oldest == nil or second < oldest then oldest = second end
      end
    end
  end
  if oldest == nil then
    redis.call('HDEL', key, 'o')
    redis.call('HSET', key, 't', 0)
  else
    redis.call('HSET', key, 't', total, 'o', oldest)
  end
  return total, oldest
end
local function window_take(key, now, window, amount, oldest)
  if redis.call('HINCRBY', key, now, amount) == amount then redis.call('EXPIRE', key, window + 1) end
  redis.call('HINCRBY', key, 't', amount)
  if oldest == nil then redis.call('HSET', key, 'o', now) end
end
"""
ADMIT = (
    _WINDOWS
    + """
local now = tonumber(redis.call('TIME')[1])
local window = tonumber(ARGV[1])
local out = {}
local oldest_of = {}
for k = 1, #KEYS do
  local used, oldest = window_use(KEYS[k], now, window)
  oldest_of[k] = oldest or false
  local amount = tonumber(ARGV[2 * k])
  local reset = (oldest or now) + window - now
  if used + amount > tonumber(ARGV[2 * k + 1]) then
    table.insert(out, 0) table.insert(out, used) table.insert(out, reset)
    table.insert(out, now)
    return out
  end
  table.insert(out, 1) table.insert(out, used + amount) table.insert(out, reset)
  table.insert(out, now)
end
for k = 1, #KEYS do
  local amount = tonumber(ARGV[2 * k])
  if amount > 0 then window_take(KEYS[k], now, window, amount, oldest_of[k] or nil) end
end
return out
"""
)
ACQUIRE = """
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if held >= tonumber(ARGV[1]) then return 0 end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
RELEASE = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 1
"""

# The request path, one round trip. KEYS: held:<process>, [the request id claim], the windows, the money
# counters. ARGV: process, window seconds, claim TTL (0: no claim), number of windows, (amount, limit) per
# window, (amount, activation required, credit limit) per money counter. Answers, nothing taken unless 1:
#   {1, now, used, reset, ...}      admitted; (used after it, seconds until it frees up) per window
#   {-1}                            the request id is claimed by a request in flight
#   {-2, window, used, reset, now}  that window (1-based) is full
#   {-3, counter, outcome}          that money counter (1-based) refused: 0 insufficient, -1 not activated
#   {-4, counter, ...}              these money counters do not exist yet: build them and ask again
ADMIT_REQUEST = (
    _WINDOWS
    + """
local process, window, claim_ttl, nw = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local k = 2
if claim_ttl > 0 then
  if redis.call('EXISTS', KEYS[2]) == 1 then return {-1} end
  k = 3
end
local first_window = k
local now = tonumber(redis.call('TIME')[1])
local out = {1, now}
local a = 5
local oldest_of = {}
for w = 1, nw do
  local used, oldest = window_use(KEYS[k], now, window)
  oldest_of[w] = oldest or false
  local amount = tonumber(ARGV[a])
  local reset = (oldest or now) + window - now
  if used + amount > tonumber(ARGV[a + 1]) then return {-2, w, used, reset, now} end
  out[#out + 1] = used + amount
  out[#out + 1] = reset
  k = k + 1
  a = a + 2
end
local first_money = k
local missing = {-4}
local state = {}
for m = first_money, #KEYS do
  state[m] = redis.call('HMGET', KEYS[m], 'b', 'r', 'a')  -- an existing counter always has its 'b'
  if not state[m][1] then missing[#missing + 1] = m - first_money + 1 end
end
if #missing > 1 then return missing end
for m = first_money, #KEYS do
  local b, r, activated = tonumber(state[m][1]), tonumber(state[m][2] or '0'), state[m][3]
  if ARGV[a + 1] == '1' and activated ~= '1' then return {-3, m - first_money + 1, -1} end
  if b + tonumber(ARGV[a + 2]) - r < tonumber(ARGV[a]) then return {-3, m - first_money + 1, 0} end
  a = a + 3
end
if claim_ttl > 0 then redis.call('SET', KEYS[2], 1, 'EX', claim_ttl) end
a = 5
for w = first_window, first_money - 1 do
  local amount = tonumber(ARGV[a])
  if amount > 0 then window_take(KEYS[w], now, window, amount, oldest_of[w - first_window + 1] or nil) end
  a = a + 2
end
local mine = 'p:' .. process
for m = first_money, #KEYS do
  redis.call('HINCRBY', KEYS[m], 'r', ARGV[a])
  -- A hash enters held:<process> when this process's share in it starts (was none): while it lasts the hash
  -- stays named there (only RECLAIM, which drops the share too, empties the set), so once is enough.
  if redis.call('HINCRBY', KEYS[m], mine, ARGV[a]) == tonumber(ARGV[a]) then
    redis.call('SADD', KEYS[1], KEYS[m])
  end
  a = a + 3
end
return out
"""
)
# After requests, one round trip for a batch (the script: `complete(window)`). ARGV[1] = process, ARGV[2] =
# the batch's number (a process
# numbers its batches 1, 2, 3… and sends them in that order, a batch Redis did not answer again before any
# later one); the last key is the hash of the number each process's last applied batch had: a batch sent
# again after Redis applied it but its answer was lost (a timeout) is not applied twice. Then per other key
# three values: an operation and its two arguments. 's' settles (reserved, -cost): it releases at most what
# this process still holds of the reservation (one `RECLAIM` already released is not released twice) and
# charges the cost; 'w' corrects a window's bucket (second, delta), and its total, if the bucket still counts;
# 'a' adds a take of an outage to a window (second, amount: `LocalShares.end`, sent only while that second is
# still in the window), its total and oldest second kept right; 'm' records a request's settled cost (row id,
# cost) in a writer's hash, which lives a week past its last record; 'f' forgets one (row id); 'd' deletes the
# key (a released request id claim; arguments unused).
COMPLETE = """
local applied = KEYS[#KEYS]
if tonumber(ARGV[2]) <= tonumber(redis.call('HGET', applied, ARGV[1]) or '0') then return 0 end
redis.call('HSET', applied, ARGV[1], ARGV[2])
local mine = 'p:' .. ARGV[1]
local kept = {}
for k = 1, #KEYS - 1 do
  local op, x, y, key = ARGV[3 * k], ARGV[3 * k + 1], ARGV[3 * k + 2], KEYS[k]
  if op == 's' then
    local share = redis.call('HGET', key, mine)  -- a share means the counter exists: no EXISTS then
    if share or redis.call('EXISTS', key) == 1 then
      local held = tonumber(share or '0')
      local release = math.min(held, tonumber(x))
      if release > 0 then
        local text = string.format('%d', -release)
        redis.call('HINCRBY', key, 'r', text)
        if redis.call('HINCRBY', key, mine, text) == 0 then redis.call('HDEL', key, mine) end
      end
      redis.call('HINCRBY', key, 'b', y)
    end
  elseif op == 'w' then
    if redis.call('HEXISTS', key, x) == 1 then
      redis.call('HINCRBY', key, x, y)
      redis.call('HINCRBY', key, 't', y)
    end
  elseif op == 'a' then
    redis.call('HINCRBY', key, x, y)
    redis.call('HINCRBY', key, 't', y)  -- a window's hash always has its 't' (window_take, window_use)
    local oldest = redis.call('HGET', key, 'o')
    if not oldest or tonumber(oldest) > tonumber(x) then redis.call('HSET', key, 'o', x) end
    if redis.call('TTL', key) < WINDOW_TTL then redis.call('EXPIRE', key, WINDOW_TTL) end
  elseif op == 'm' then
    redis.call('HSET', key, x, y)
    if not kept[key] then
      redis.call('EXPIRE', key, 604800)
      kept[key] = true
    end
  elseif op == 'f' then
    redis.call('HDEL', key, x)
  else
    redis.call('DEL', key)
  end
end
return #KEYS - 1
"""


def complete(window_seconds: int) -> str:
    """`COMPLETE` for windows of `window_seconds` (a window's hash lives a second longer than its window)."""
    return COMPLETE.replace("WINDOW_TTL", str(window_seconds + 1))
