-- gcra.lua: the rate-limit script people usually copy into their Redis, the
-- Generic Cell Rate Algorithm (GCRA, the ATM Forum's virtual scheduling
-- algorithm), written here from the published algorithm as the baseline
-- for scripts/bench-redis.sh. It is not part of the pacer: it has no wait
-- bound, no refusal hint, no tickets and no counters; it is what the
-- pacer's script is compared with.
--
--   SCRIPT LOAD "$(cat bench/redis/gcra.lua)"
--   EVALSHA <sha1> 1 <key> <rate> <period_ms> <burst>
--
-- `rate` requests per `period_ms`, up to `burst` at once after an idle spell.
-- Reply: { allowed (1 or 0), remaining, retry_after_ms, reset_after_ms }:
-- requests left that would be allowed now; when refused, how long until
-- one would be; how long until the key is back to a full burst (and
-- expires).
--
-- The algorithm. One stored value per key, the theoretical arrival time
-- TAT: when the next request would be due if requests came exactly at the
-- rate. With the emission interval T = period / rate and the burst
-- tolerance tau = T · (burst − 1), a request arriving at `now` conforms iff
--
--     now ≥ TAT − tau
--
-- (it may come early by at most tau); then TAT = max(TAT, now) + T. A
-- missing key is TAT = now (a full burst). A refused request changes
-- nothing. Once now ≥ TAT the key holds nothing that matters, so it is
-- stored with an expiry at TAT (SET … PX).
--
-- Times are milliseconds, as doubles, from the server's TIME, so every
-- client sees one clock; TAT keeps a fractional part (T need not be whole).
-- Redis 7 replicates a script's effects, so reading TIME before a write is
-- allowed.

local key = KEYS[1]
local rate = tonumber(ARGV[1])
local period_ms = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
if not (rate and period_ms and burst) or rate <= 0 or period_ms <= 0 or burst < 1 then
  return redis.error_reply('ERR gcra: expected <rate> <period_ms> <burst>, all positive')
end

local interval = period_ms / rate -- T
local tolerance = interval * (burst - 1) -- tau

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000

local tat = tonumber(redis.call('GET', key)) or now
local allow_at = tat - tolerance

if now < allow_at then
  -- Too early: refused, nothing written.
  return { 0, 0, math.ceil(allow_at - now), math.ceil(tat - now) }
end

local new_tat = math.max(tat, now) + interval
local ttl_ms = math.ceil(new_tat - now)
redis.call('SET', key, string.format('%.3f', new_tat), 'PX', ttl_ms)

-- The next request conforms from new_tat − tau; each T before that is one
-- more that would conform now.
local remaining = math.floor((now - (new_tat - tolerance)) / interval) + 1
if remaining < 0 then
  remaining = 0
end
return { 1, remaining, 0, ttl_ms }
