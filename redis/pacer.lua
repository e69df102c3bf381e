-- pacer.lua: the pacer's rule in Lua, for Redis services that load no
-- modules (docs/redis.md). It is a second implementation of
-- core/src/pacer.rs, core/src/budget.rs and core/src/adaptive.rs, kept
-- honest by the differential test (redis/tests/differential.rs) and the
-- edge tests in redis/tests/lua_exact.rs. It loads two ways:
--
--   a function library (Redis 7.0+; the faster way):
--     { echo '#!lua name=pacer'; cat redis/pacer.lua; } | redis-cli -x FUNCTION LOAD REPLACE
--     FCALL pacer 1 <key> <op> <arguments…>
--     FCALL_RO pacer_ro 1 <key> info [AT <ms>]    (read-only: on replicas too)
--   a script:
--     SCRIPT LOAD "$(cat redis/pacer.lua)"
--     EVALSHA <sha1> 1 <key> <op> <arguments…>
--
-- op is create, reserve, book, release, redeem, info or observe; the arguments
-- are those of the module's command of that name, after the key.
--
-- Exactness: Lua numbers are doubles, exact for integers below 2^53. Every
-- input is below 2^52 (checked on entry) and every intermediate stays below
-- 2^53 (docs/redis.md, "Exact in Lua"); divisions go through floor_div,
-- which is exact. Numbers are turned into text only by string.format('%d'),
-- never tostring (which would print 4.5035996273705e+15).

-- `AT <ms>` replaces the server's clock only in a copy of this script whose
-- next line says true (the tests' copy). Shipped: false.
local TEST_CLOCK = false

local UNITS_PER_TOKEN = 60000 -- pacer::UNITS_PER_TOKEN: one token
local MAX_RATE_PER_MIN = 600 -- budget::MAX_RATE_PER_MIN
local MAX_BURST = 1000000 -- pacer::MAX_BURST
local MS_PER_MINUTE = 60000 -- budget::MS_PER_MINUTE
local LADDER_BASE_MS = 2000 -- budget::LADDER_BASE_MS
local WAIT_BOUND_CEILING_MS = 15000 -- budget::WAIT_BOUND_CEILING_MS
local SEQ_MODULUS = 16777216 -- 2^24: the release stack counter's range
local TWO_POW_52 = 4503599627370496 -- every input number is below this
local TWO_POW_53 = 9007199254740992 -- doubles are exact below this
local LARGEST = TWO_POW_52 - 1 -- where counters stop, and serials end

-- Adaptive pacing (core/src/adaptive.rs, SPEC §14): each constant once,
-- here; redis/tests/lua_exact.rs compares them with the core's.
local WINDOW_MS = 60000 -- adaptive::WINDOW_MS: openings are counted per minute
local HOLD_MS = 60000 -- adaptive::HOLD_MS: a probe's throttles within it are one episode
local SEARCH_DOUBLING_MS = 5000 -- adaptive::SEARCH_DOUBLING_MS
local RESEARCH_DOUBLING_MS = 20000 -- adaptive::RESEARCH_DOUBLING_MS: a search again
local SEARCH_DOUBLINGS_CAP = 10 -- adaptive::SEARCH_DOUBLINGS_CAP: then at the ceiling
local PROBE_WAIT_MS = 240000 -- adaptive::PROBE_WAIT_MS: at L this long after the hold
local PROBE_EVERY_OPENINGS = 80 -- adaptive::PROBE_EVERY_OPENINGS: and at least this many openings' time
local QUICK_PROBE = 12 -- adaptive::QUICK_PROBE: the wait's divisor with `again`
local PROBE_STEP_DEN = 2 -- adaptive::PROBE_STEP_DEN: after a search a probe runs at L + ⌊L/2⌋ + 2
local NARROW_STEP_DEN = 4 -- adaptive::NARROW_STEP_DEN: after a probe's throttle, a step of ⌊L/4⌋
local NARROW_STEP_MIN = 80 -- adaptive::NARROW_STEP_MIN: but at least min(⌊L/2⌋, 80)
local RISE_MARGIN = 8 -- adaptive::RISE_MARGIN: a count above L + ⌊L/8⌋ + 1 is a rise
local SEARCH_NO_WAITS_MS = 60000 -- adaptive::SEARCH_NO_WAITS_MS: a search grants no waits for a minute
local CUT_DEN = 16 -- adaptive::CUT_DEN: an unexplained throttle cuts 1/16
local COUNT_CAP = 65535 -- adaptive::COUNT_CAP: the largest count (and minute)

-- The wait histogram's upper bounds, ms: pacer_core::WAIT_BOUNDS_MS
-- (core/src/counters.rs; redis/tests/lua_exact.rs checks they are equal).
-- An admission's wait above 0 counts in the first bucket whose bound is at
-- or above it, in none above the last.
local WAIT_BOUNDS_MS = { 10, 50, 100, 500, 1000, 2500, 5000, 10000 }
-- The bucket table's field of each bound's count, in the same order.
local WAIT_BUCKET_FIELDS = {
  'wait_bucket_10', 'wait_bucket_50', 'wait_bucket_100', 'wait_bucket_500',
  'wait_bucket_1000', 'wait_bucket_2500', 'wait_bucket_5000', 'wait_bucket_10000',
}

local HEADER_LEN = 512 -- bytes 0–511: the header's two blocks
local FIRST_BLOCK_LEN = 256 -- bytes 0–255: the first block; 256–511 the second
local SPENT_WINDOW = 65536 -- bits in the spent bitmap: the live tickets
local SPENT_BITMAP_BIT = HEADER_LEN * 8 -- the bitmap's first bit (SETBIT)

-- ---------------------------------------------------------------------------
-- Errors. fail() aborts the call; the entry point (at the end) turns it into
-- the error reply "ERR pacer: <message>". Every check runs before the first
-- write, so a failed call changes nothing.

local PacerError = {}

local function fail(message)
  error(setmetatable({ message = message }, PacerError), 0)
end

local function fmt(...)
  return string.format(...)
end

-- A client's bytes as a message shows them: printable ASCII as it is,
-- every other byte and the backslash as \xNN, so an error reply is one
-- line of ASCII whatever the key or argument holds.
local function shown(text)
  return (string.gsub(text, '.', function(c)
    local b = string.byte(c)
    if b >= 32 and b <= 126 and b ~= 92 then
      return c
    end
    return string.format('\\x%02x', b)
  end))
end

-- A write (SETRANGE, SETBIT). Redis's refusal of it (READONLY on a
-- replica, OOM at maxmemory: always a call's first write, so nothing is
-- written) ends the call with Redis's own error as it came, the module's
-- reply too; a redis.call would have it reworded with this file's line.
local function write(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    error(setmetatable({ redis_error = reply }, PacerError), 0)
  end
  return reply
end

local function not_a_bucket(key)
  fail(fmt("key '%s' is not a pacer bucket", shown(key)))
end

-- ---------------------------------------------------------------------------
-- Exact integer helpers.

-- ⌊a / b⌋ for whole a ≥ 0, b > 0. math.fmod is exact, so the subtraction
-- leaves a multiple of b and the division is exact too (Lua's own `%` is
-- a − floor(a/b)·b, which would round first).
local function floor_div(a, b)
  return (a - math.fmod(a, b)) / b
end

-- ⌈a / b⌉ for whole a ≥ 0, b > 0 (u64::div_ceil); a + b stays below 2^53
-- for every a this script divides.
local function ceil_div(a, b)
  return floor_div(a + b - 1, b)
end

local function min(a, b)
  if a < b then
    return a
  end
  return b
end

local function max(a, b)
  if a > b then
    return a
  end
  return b
end

-- 1 for true, 0 for false (a reply's or a header field's flag).
local function flag(value)
  if value then
    return 1
  end
  return 0
end

-- ---------------------------------------------------------------------------
-- Arguments (docs/redis.md, "Commands").

-- A whole decimal: `0`, or a digit 1–9 followed by at most 15 digits, with
-- a value below `limit` (2^52 unless given). A 16-digit text is at most
-- 10^16 − 1; strtod rounds it to nearest, which keeps `< limit` exact for a
-- limit that is a power of two.
local function parse_whole(text, limit)
  if #text <= 16 and (text == '0' or string.match(text, '^[1-9]%d*$')) then
    local value = tonumber(text)
    if value < (limit or TWO_POW_52) then
      return value
    end
  end
  return nil
end

-- parse_whole, or the error naming the argument.
local function whole_argument(text, name)
  local value = parse_whole(text)
  if value == nil then
    fail(fmt("%s must be a whole number below 2^52, got '%s'", name, shown(text)))
  end
  return value
end

-- The five configuration arguments from args[first], in order, then (when
-- `adapt` is the index of ADAPT's floor) its floor and ceiling: each number
-- is checked for form as it is read; ranges are Params::plan's (plan below).
local function parse_config(args, first, adapt)
  local rate_per_min = whole_argument(args[first], 'rate_per_min')
  local burst = whole_argument(args[first + 1], 'burst')
  local idle_timeout_ms = whole_argument(args[first + 2], 'idle_timeout_ms')
  local max_retries = whole_argument(args[first + 3], 'max_retries')
  local policy = args[first + 4]
  if policy ~= 'refund' and policy ~= 'strict' then
    fail(fmt("release_policy must be refund or strict, got '%s'", shown(policy)))
  end
  local floor, ceiling = 0, 0
  if adapt then
    floor = whole_argument(args[adapt], 'adaptive_floor_per_min')
    ceiling = whole_argument(args[adapt + 1], 'adaptive_ceiling_per_min')
  end
  -- Stored and compared in one form: a floor of 0 is a fixed-rate bucket
  -- (the ceiling is ignored, as the core ignores it), a ceiling of 0 is
  -- the rate.
  local stored_ceiling = 0
  if floor > 0 then
    stored_ceiling = (ceiling == 0) and rate_per_min or ceiling
  end
  return {
    rate_per_min = rate_per_min,
    -- Params::plan: a burst of 0 means 1; stored and compared as 1.
    burst = (burst == 0) and 1 or burst,
    raw_burst = burst,
    idle_timeout_ms = idle_timeout_ms,
    max_retries = max_retries,
    release_policy = policy,
    adaptive_floor_per_min = floor,
    adaptive_ceiling_per_min = stored_ceiling,
    raw_ceiling = ceiling,
  }
end

-- Whether two configurations are the same bucket's (burst as stored: 0 is
-- 1; the adaptive range as stored).
local function same_config(a, b)
  return a.rate_per_min == b.rate_per_min
    and a.burst == b.burst
    and a.idle_timeout_ms == b.idle_timeout_ms
    and a.max_retries == b.max_retries
    and a.release_policy == b.release_policy
    and a.adaptive_floor_per_min == b.adaptive_floor_per_min
    and a.adaptive_ceiling_per_min == b.adaptive_ceiling_per_min
end

local function config_text(config)
  local text = fmt(
    'rate_per_min=%d burst=%d idle_timeout_ms=%d max_retries=%d release_policy=%s',
    config.rate_per_min,
    config.burst,
    config.idle_timeout_ms,
    config.max_retries,
    config.release_policy
  )
  if config.adaptive_floor_per_min > 0 then
    text = text
      .. fmt(
        ' adaptive_floor_per_min=%d adaptive_ceiling_per_min=%d',
        config.adaptive_floor_per_min,
        config.adaptive_ceiling_per_min
      )
  end
  return text
end

-- ---------------------------------------------------------------------------
-- The budget (core/src/budget.rs).

-- budget::backoff_ms: 2000 · (2^r − 1). Only called with 2000 · (2^r − 1)
-- below 2^53 (r ≤ 42; see ladder_ceiling), where 2^r and the product are
-- exact.
local function backoff_ms(retries)
  return LADDER_BASE_MS * (2 ^ retries - 1)
end

-- budget::ladder_ceiling: the largest r with backoff(r) < idle. With idle
-- below 2^52 the loop stops by r = 42, whose backoff 2000 · (2^42 − 1) is
-- still below 2^53.
local function ladder_ceiling(idle_timeout_ms)
  local retries = 0
  while backoff_ms(retries + 1) < idle_timeout_ms do
    retries = retries + 1
  end
  return retries
end

-- budget::wait_bound_ms: min(15000, ⌊(idle − backoff(r)) / (2·(r+1))⌋),
-- 0 when the ladder alone reaches the deadline. r is at most the ladder
-- ceiling here (plan checks it first).
local function wait_bound_ms(idle_timeout_ms, max_retries)
  local ladder = backoff_ms(max_retries)
  if ladder >= idle_timeout_ms then
    return 0
  end
  local share = floor_div(idle_timeout_ms - ladder, 2 * (max_retries + 1))
  return min(share, WAIT_BOUND_CEILING_MS)
end

-- budget::hint_cap_s: max(1, ⌊bound/1000⌋).
local function hint_cap_s(bound_ms)
  local whole = floor_div(bound_ms, 1000)
  if whole == 0 then
    return 1
  end
  return whole
end

-- budget::can_refuse: r > 0, rate > 0 and r · cap_s · 1000 · rate ≥ 60000
-- (budget::refusal_schedule_ms times the rate; r ≤ 41, so no saturation).
local function can_refuse(rate_per_min, max_retries, bound_ms)
  return max_retries > 0
    and rate_per_min > 0
    and max_retries * hint_cap_s(bound_ms) * 1000 * rate_per_min >= MS_PER_MINUTE
end

-- budget::pacing_enabled: rate > 0 and bound > 0.
local function pacing_enabled(rate_per_min, bound_ms)
  return rate_per_min > 0 and bound_ms > 0
end

-- ---------------------------------------------------------------------------
-- Params::plan: the configuration checked and its derived parameters.

-- Why Params::plan rejects `config` (its ConfigError, as text), or nil.
local function config_error(config)
  if config.rate_per_min > MAX_RATE_PER_MIN then
    return fmt('rate_per_min %d is above %d', config.rate_per_min, MAX_RATE_PER_MIN)
  end
  if config.raw_burst > MAX_BURST then
    return fmt('burst %d is above %d', config.raw_burst, MAX_BURST)
  end
  local ceiling = ladder_ceiling(config.idle_timeout_ms)
  if config.max_retries > ceiling then
    return fmt(
      'max_retries %d is above %d, the most whose backoff ladder fits a %d ms idle timeout',
      config.max_retries,
      ceiling,
      config.idle_timeout_ms
    )
  end
  local floor = config.adaptive_floor_per_min
  local top = config.adaptive_ceiling_per_min -- 0 (the rate) already replaced
  if floor > 0 and (floor > config.rate_per_min or top < config.rate_per_min or top > MAX_RATE_PER_MIN) then
    return fmt(
      'ADAPT %d %d does not fit rate_per_min %d: adaptive pacing needs '
        .. 'floor <= rate_per_min <= ceiling <= %d (ceiling 0 means rate_per_min)',
      floor,
      config.raw_ceiling,
      config.rate_per_min,
      MAX_RATE_PER_MIN
    )
  end
  return nil
end

-- The mode at `rate` (Params::at_rate).
local function mode_at(rate, max_retries, bound_ms)
  if not pacing_enabled(rate, bound_ms) then
    return 'disabled'
  elseif can_refuse(rate, max_retries, bound_ms) then
    return 'refusing'
  elseif max_retries > 0 then
    return 'shaping-low-rate'
  end
  return 'shaping-no-retry'
end

-- Params::at_rate: `params` at `rate` (≤ 600): the rate and what SPEC §3
-- derives from it, the mode and the debt floor (the wait, ⌈deficit/rate⌉,
-- reads params.rate). The bound and the hint depend on the budget alone.
local function at_rate(params, rate)
  return {
    rate = rate,
    max_retries = params.max_retries,
    capacity_units = params.capacity_units,
    max_debt_units = params.bound_ms * rate, -- ≤ 15000 · 600
    bound_ms = params.bound_ms,
    refusal_hint_s = params.refusal_hint_s,
    mode = mode_at(rate, params.max_retries, params.bound_ms),
    strict = params.strict,
  }
end

-- Params::plan, for a config config_error accepts: the parameters at the
-- configured rate.
local function plan(config)
  local bound_ms = wait_bound_ms(config.idle_timeout_ms, config.max_retries)
  return at_rate({
    max_retries = config.max_retries,
    capacity_units = config.burst * UNITS_PER_TOKEN, -- ≤ 6·10^10
    bound_ms = bound_ms,
    refusal_hint_s = hint_cap_s(bound_ms),
    strict = config.release_policy == 'strict',
  }, config.rate_per_min)
end

-- ---------------------------------------------------------------------------
-- Adaptive pacing (core/src/adaptive.rs, `impl Range`): the rate in force
-- follows the upstream's answers. An adaptive bucket holds its range
-- (adaptive_floor_per_min, adaptive_ceiling_per_min) and its control word:
-- origin_ms (t₀), window (the minute of the counts, relative to t₀'s),
-- opened and opened_before (that minute's openings and the one before's),
-- limit_per_min (L), probing and again (0 or 1).
--
-- Exact in doubles: ℓ = min(L, ceiling) ≤ 600; a search term is below
-- 600·2^9·2·RESEARCH_DOUBLING_MS; a wait below PROBE_EVERY_OPENINGS·
-- WINDOW_MS; a count is at most 65535, so opened_before·WINDOW_MS < 2^32;
-- the origin is below 2^52 + WINDOW_MS (a pause moves it a minute past a
-- clock below 2^52) (the tests check these bounds against the core's
-- constants).

-- adaptive::lowest_rate: the floor raised to the lowest rate that can
-- refuse, ⌈60000 / schedule⌉ with schedule = r · hint_cap_s · 1000
-- (budget::refusal_schedule_ms; r ≤ 41, so no saturation), never above the
-- ceiling; the floor when nothing can refuse (no retries).
local function lowest_rate(params, bucket)
  local floor = bucket.adaptive_floor_per_min
  local schedule = params.max_retries * hint_cap_s(params.bound_ms) * 1000
  if schedule == 0 then
    return floor
  end
  return max(min(ceil_div(MS_PER_MINUTE, schedule), bucket.adaptive_ceiling_per_min), floor)
end

-- adaptive::probe_wait_ms: how long the rate stays at L after the hold,
-- max(PROBE_WAIT_MS, PROBE_EVERY_OPENINGS·WINDOW_MS/ℓ), divided by
-- QUICK_PROBE with `again`.
local function probe_wait_ms(limit, again)
  local wait = max(PROBE_WAIT_MS, floor_div(PROBE_EVERY_OPENINGS * WINDOW_MS, max(limit, 1)))
  if again == 1 then
    wait = floor_div(wait, QUICK_PROBE)
  end
  return wait
end

-- adaptive::probe_step: the probe's step above ℓ (before the + 2):
-- ⌊ℓ/PROBE_STEP_DEN⌋ with `again` (after a search); after a probe's
-- throttle ⌊ℓ/NARROW_STEP_DEN⌋, but at least min(⌊ℓ/PROBE_STEP_DEN⌋,
-- NARROW_STEP_MIN).
local function probe_step(limit, again)
  local wide = floor_div(limit, PROBE_STEP_DEN)
  if again == 1 then
    return wide
  end
  return max(floor_div(limit, NARROW_STEP_DEN), min(wide, NARROW_STEP_MIN))
end

-- Range::step_from_ms: while probing, how long after the origin the step
-- begins: the hold and the wait at ℓ = min(L, ceiling).
local function step_from_ms(bucket)
  return HOLD_MS + probe_wait_ms(min(bucket.limit_per_min, bucket.adaptive_ceiling_per_min), bucket.again)
end

-- Range::rate_at: clamp(curve, lowest, ceiling) at now_ms. Searching (a
-- reading before the origin reads the origin): ℓ·2ⁿ·(D + r)/D, D the
-- doubling period (RESEARCH_DOUBLING_MS with `again`), n = ⌊Δ/D⌋,
-- r = Δ mod D, the ceiling from n ≥ SEARCH_DOUBLINGS_CAP. Probing: the
-- lowest before the origin (the pause), ℓ until HOLD_MS + the wait, then
-- ℓ + probe_step(ℓ, again) + 2.
local function rate_at(bucket, lowest, now_ms)
  local probing = bucket.probing == 1
  if probing and now_ms < bucket.origin_ms then
    return lowest
  end
  local elapsed = 0
  if now_ms > bucket.origin_ms then
    elapsed = now_ms - bucket.origin_ms
  end
  local ceiling = bucket.adaptive_ceiling_per_min
  local limit = min(bucket.limit_per_min, ceiling)
  local curve
  if not probing then
    local period = SEARCH_DOUBLING_MS
    if bucket.again == 1 then
      period = RESEARCH_DOUBLING_MS
    end
    local doublings = floor_div(elapsed, period)
    if doublings >= SEARCH_DOUBLINGS_CAP then
      curve = ceiling
    else
      local within = elapsed - doublings * period
      curve = floor_div(limit * 2 ^ doublings * (period + within), period)
    end
  elseif elapsed < step_from_ms(bucket) then
    curve = limit
  else
    curve = limit + probe_step(limit, bucket.again) + 2
  end
  return min(max(curve, lowest), ceiling)
end

-- Params::in_force: the parameters at the rate in force at now_ms (the
-- planned ones for a fixed-rate bucket, or with pacing disabled). In the
-- first SEARCH_NO_WAITS_MS of a search (adaptive::grants_waits) a refusing
-- bucket grants no waits: its bound in force and its debt floor are 0 (the
-- refusal hint stays the planned one).
local function in_force(params, bucket, now_ms)
  if bucket.adaptive_floor_per_min == 0 or params.mode == 'disabled' then
    return params
  end
  local current = at_rate(params, rate_at(bucket, lowest_rate(params, bucket), now_ms))
  if current.mode == 'refusing' and bucket.probing ~= 1
      and now_ms - bucket.origin_ms < SEARCH_NO_WAITS_MS then
    current.bound_ms = 0
    current.max_debt_units = 0
  end
  return current
end

-- adaptive::rolled: the bucket's counts moved to the minute of `at` (≥ its
-- origin): the count becomes the one before when that minute is the next
-- one, and is dropped when it is later.
local function roll(bucket, at)
  local window = min(floor_div(at, WINDOW_MS) - floor_div(bucket.origin_ms, WINDOW_MS), COUNT_CAP)
  if window > bucket.window then
    if window == bucket.window + 1 then
      bucket.opened_before = bucket.opened
    else
      bucket.opened_before = 0
    end
    bucket.window, bucket.opened = window, 0
  end
end

-- adaptive::through: the larger of the two counts.
local function through(bucket)
  return max(bucket.opened, bucket.opened_before)
end

-- adaptive::recent: this minute's count plus the one before's times the
-- share of it still inside the 60 s before `at`.
local function recent(bucket, at)
  local left = WINDOW_MS - (at - floor_div(at, WINDOW_MS) * WINDOW_MS)
  return bucket.opened + floor_div(bucket.opened_before * left, WINDOW_MS)
end

-- Params::observe (Range::observe): the upstream's answer `outcome` at
-- now_ms. Writes the new control word into `bucket` when there is one and
-- returns whether adaptation is on (the observation is counted: a throttle
-- within the hold too, which leaves the control word as it was), and the
-- rate in force after it.
local function observe(params, bucket, outcome, now_ms)
  if bucket.adaptive_floor_per_min == 0 or params.mode == 'disabled' then
    return false, params.rate
  end
  local lowest = lowest_rate(params, bucket)
  local at = max(now_ms, bucket.origin_ms)
  local rate = rate_at(bucket, lowest, now_ms) -- read at the caller's clock
  local probing = bucket.probing == 1
  local held = probing and at - bucket.origin_ms < HOLD_MS
  local limit = bucket.limit_per_min
  -- At the probe's step (past the hold and the wait).
  local stepped = probing and at - bucket.origin_ms >= step_from_ms(bucket)
  if outcome == 'opened' then
    roll(bucket, at)
    bucket.opened = min(bucket.opened + 1, COUNT_CAP)
    if not probing or held or through(bucket) <= limit + floor_div(limit, RISE_MARGIN) + 1 then
      return true, rate
    end
    -- More got through in a minute than the limit learned: it rose.
    -- Search again from the rate in force.
    bucket.probing, bucket.again, bucket.limit_per_min = 0, 1, rate
  elseif held then
    return true, rate -- the same episode's throttle: counted, the law unmoved
  else
    roll(bucket, at)
    -- After a search, the count's guess at the last 60 s; while probing,
    -- the larger whole-minute count.
    local seen = through(bucket)
    if not probing then
      seen = max(seen, recent(bucket, at))
    end
    if seen == 0 then
      -- Nothing counted: a step down from the lower of the rate and L.
      local base = min(rate, limit)
      limit = base - min(max(1, floor_div(base, CUT_DEN)), base)
    elseif not probing then
      limit = min(seen, bucket.adaptive_ceiling_per_min) -- a search's burst
    elseif seen < rate and stepped then
      -- L held through the hold and the wait without a throttle: this one
      -- says the limit is below the step, not below L.
      limit = max(seen, limit)
    elseif seen < rate then
      limit = seen
    else
      limit = rate - max(1, floor_div(rate, CUT_DEN)) -- the count does not explain it
    end
    -- The first search's openings fill the upstream's window until a
    -- minute after it began: pause until then (the counts moved to that
    -- minute).
    local origin = at
    if not probing and bucket.again == 0 then
      origin = max(at, bucket.origin_ms + WINDOW_MS)
    end
    bucket.probing, bucket.again, bucket.limit_per_min = 1, flag(not probing), limit
    bucket.origin_ms, bucket.window = at, 0
    roll(bucket, origin)
    bucket.origin_ms, bucket.window = origin, 0
    return true, rate_at(bucket, lowest, now_ms)
  end
  bucket.origin_ms, bucket.window = at, 0
  return true, rate_at(bucket, lowest, now_ms)
end

-- ---------------------------------------------------------------------------
-- The rule (core/src/pacer.rs, `impl Params`): pure functions of (params,
-- state, now). A state is { high_water_ms, tokens_units, seq }. A
-- transition returns the next state (nil: nothing changes) and the answer.

-- Params::effective_now: a reading behind the high-water mark is the mark.
local function effective_now(state, now_ms)
  if now_ms < state.high_water_ms then
    return state.high_water_ms, true
  end
  return now_ms, false
end

-- Params::refill: tokens at at_ms ≥ high_water_ms, capped at capacity.
-- The core saturates elapsed · rate and compares it with the room; here
-- `elapsed · rate ≥ room` is tested as `elapsed ≥ ⌈room/rate⌉` (equivalent
-- for whole numbers), so the product is formed only below ⌈room/rate⌉,
-- where it is under room + rate (exact).
local function refill(params, state, at_ms)
  local elapsed_ms = at_ms - state.high_water_ms
  local room = params.capacity_units - state.tokens_units
  if room == 0 then
    return params.capacity_units -- gain ≥ 0 = room
  end
  if params.rate == 0 then
    return state.tokens_units -- gain 0 < room
  end
  if elapsed_ms >= ceil_div(room, params.rate) then
    return params.capacity_units
  end
  return state.tokens_units + elapsed_ms * params.rate
end

-- Params::view: the instant to act at, whether the clock regressed, and the
-- refilled level.
local function view(params, state, now_ms)
  local at_ms, clock_regressed = effective_now(state, now_ms)
  return at_ms, clock_regressed, refill(params, state, at_ms)
end

-- Params::wait_ms: ⌈deficit / rate⌉ (the core multiplies by a reciprocal;
-- the result is the same). deficit ≤ 60000 + horizon_max · rate.
local function wait_ms(params, deficit)
  return ceil_div(deficit, params.rate)
end

-- Params::horizon_ms: bound + min(retries_left, max_retries) · cap_s · 1000.
-- (The module clamps retries_left to 2^32 − 1 first, as the core takes a
-- u32; that cannot change the minimum, since max_retries ≤ 41.)
local function horizon_ms(params, retries_left)
  local retries = min(retries_left, params.max_retries)
  return params.bound_ms + retries * params.refusal_hint_s * 1000
end

-- Params::booking_hint_s: clamp(⌈beyond/1000⌉, 1, cap_s).
local function booking_hint_s(params, beyond_bound_ms)
  local wanted = ceil_div(beyond_bound_ms, 1000)
  if wanted < 1 then
    return 1
  elseif wanted > params.refusal_hint_s then
    return params.refusal_hint_s
  end
  return wanted
end

-- Params::decide: SPEC §4 steps 3–6 at token level `tokens`, as values
-- (no table: this runs on every call): 'debit', wait_ms, units, path;
-- 'free'; or 'refuse', required_wait_ms.
local function decide(params, tokens)
  if tokens >= UNITS_PER_TOKEN then
    return 'debit', 0, UNITS_PER_TOKEN, 'paced'
  end
  local wait = wait_ms(params, UNITS_PER_TOKEN - tokens)
  if wait <= params.bound_ms then
    return 'debit', wait, UNITS_PER_TOKEN, 'paced'
  end
  if params.mode == 'refusing' then
    return 'refuse', wait
  end
  -- Shaping: debit down to the floor −max_debt, never past it.
  local units = min(tokens + params.max_debt_units, UNITS_PER_TOKEN)
  if units > 0 then
    return 'debit', params.bound_ms, units, 'shaped'
  end
  return 'free'
end

-- Params::debit: the state after debiting `units` at at_ms, and the
-- ticket's seq (the next stack position, mod 2^24).
local function debit(state, at_ms, tokens, units)
  local seq = (state.seq + 1) % SEQ_MODULUS
  return { high_water_ms = at_ms, tokens_units = tokens - units, seq = seq }, seq
end

-- Admission::DISABLED and Admission::overflow.
local function admitted_free(path, clock_regressed)
  return { kind = 'admitted', wait_ms = 0, path = path, clock_regressed = clock_regressed }
end

-- A debit's answer and a refusal (what reserve and reserve_or_book share
-- once the step is known).
local function debited(state, at_ms, tokens, wait, units, path, clock_regressed)
  local next_state, seq = debit(state, at_ms, tokens, units)
  return next_state,
    {
      kind = 'admitted',
      wait_ms = wait,
      seq = seq,
      debit_units = units,
      path = path,
      clock_regressed = clock_regressed,
    }
end

local function refusal(params, required_wait_ms, clock_regressed)
  return nil,
    {
      kind = 'refused',
      retry_after_s = params.refusal_hint_s,
      required_wait_ms = required_wait_ms,
      clock_regressed = clock_regressed,
    }
end

-- Params::reserve (SPEC §4). Answers { kind = 'admitted', wait_ms, seq?,
-- debit_units?, path, clock_regressed } (seq and debit_units: the ticket,
-- absent when nothing was debited) or { kind = 'refused', retry_after_s,
-- required_wait_ms, clock_regressed }.
local function reserve(params, state, now_ms)
  if params.mode == 'disabled' then
    return nil, admitted_free('disabled', false)
  end
  local at_ms, clock_regressed, tokens = view(params, state, now_ms)
  local kind, wait, units, path = decide(params, tokens)
  if kind == 'refuse' then
    return refusal(params, wait, clock_regressed)
  elseif kind == 'free' then
    return nil, admitted_free('overflow', clock_regressed)
  end
  return debited(state, at_ms, tokens, wait, units, path, clock_regressed)
end

-- Params::reserve_or_book (SPEC §11): reserve, except that a refusal within
-- the horizon of retries_left books a place in line, answering
-- { kind = 'booked', retry_after_s, seq, debit_units, slot_ms,
-- clock_regressed }.
local function reserve_or_book(params, state, now_ms, retries_left)
  local next_state, answer = reserve(params, state, now_ms)
  local wait = answer.required_wait_ms
  if answer.kind ~= 'refused' or wait > horizon_ms(params, retries_left) then
    return next_state, answer
  end
  local at_ms, clock_regressed, tokens = view(params, state, now_ms)
  -- A place in line: the token the slot will use.
  local booked_state, seq = debit(state, at_ms, tokens, UNITS_PER_TOKEN)
  return booked_state,
    {
      kind = 'booked',
      retry_after_s = booking_hint_s(params, wait - params.bound_ms),
      seq = seq,
      debit_units = UNITS_PER_TOKEN,
      slot_ms = at_ms + wait, -- < 2^52 + 2^20: exact, no saturation
      clock_regressed = clock_regressed,
    }
end

-- Params::redeem: pure arithmetic on the parameters, at the raw clock.
-- Answers { kind = 'admitted', wait_ms } or { kind = 'notyet', retry_after_s }.
local function redeem(params, slot_ms, now_ms)
  local bound = params.bound_ms
  if slot_ms <= now_ms + bound then
    local wait = 0
    if slot_ms > now_ms then
      wait = slot_ms - now_ms -- slot.saturating_sub(now)
    end
    return { kind = 'admitted', wait_ms = wait }
  end
  return { kind = 'notyet', retry_after_s = booking_hint_s(params, slot_ms - bound - now_ms) }
end

-- Params::release: the ticket's debit back at now_ms, capped at capacity.
-- Returns the next state (nil: unchanged) and whether the policy refunded.
local function release(params, state, ticket, now_ms)
  local debit_units = ticket.debit_units
  if params.mode == 'disabled' then
    return nil, false
  end
  if debit_units <= 0 or debit_units > UNITS_PER_TOKEN or ticket.seq >= SEQ_MODULUS then
    return nil, false
  end
  if params.strict and state.seq ~= ticket.seq then
    return nil, false -- a later debit is still out: strict refuses
  end
  local at_ms = effective_now(state, now_ms)
  local tokens = min(refill(params, state, at_ms) + debit_units, params.capacity_units)
  local seq = state.seq
  if params.strict then
    seq = (state.seq + SEQ_MODULUS - 1) % SEQ_MODULUS -- wrapping_sub(1), 24 bits
  end
  return { high_water_ms = at_ms, tokens_units = tokens, seq = seq }, true
end

-- ---------------------------------------------------------------------------
-- The key (docs/redis.md, "The key"): key format 2, a 512-byte header of
-- fixed-width fields, each right-aligned with leading zeros, one space
-- between them, bytes 199 to 255 spaces for a fixed-rate bucket; then the
-- spent bitmap from byte 512. A key of format 1 (PACER1, a 256-byte
-- header) is refused.
--
--   bytes    width  field
--   0–5        6    PACER2
--   7–9        3    rate_per_min
--   11–17      7    burst (0 stored as 1)
--   19–34     16    idle_timeout_ms
--   36–37      2    max_retries
--   39         1    release_policy: 0 refund, 1 strict
--   41–56     16    secret, lowercase hex
--   58–73     16    high_water_ms
--   75–87     13    tokens_units: sign, then 12 digits ("+000000600000")
--   89–96      8    seq
--   98–113    16    serial: the next ticket's
--   115–130   16    admitted
--   132–147   16    refused
--   149–164   16    booked
--   166–181   16    released
--   183–198   16    release_refused
--
-- and for an adaptive bucket only (spaces otherwise):
--
--   200–202    3    adaptive_floor_per_min (1 or more)
--   204–206    3    adaptive_ceiling_per_min (0 in a call is stored as the rate)
--   208–223   16    origin_ms
--   225–229    5    window (0–65535)
--   231–235    5    opened (0–65535)
--   237–241    5    opened_before (0–65535)
--   243–247    5    limit_per_min (0 to the ceiling)
--   249        1    probing: 0 or 1
--   251        1    again: 0 or 1
--   252–255         spaces
--
-- and the second block, for every bucket (16 digits each):
--
--   256–271   16    admitted_after_wait
--   273–288   16    shaped
--   290–305   16    redeemed
--   307–322   16    upstream_opened
--   324–339   16    upstream_throttled
--   341–356   16    wait_ms_total
--   358–373   16    wait_bucket_10
--   375–390   16    wait_bucket_50
--   392–407   16    wait_bucket_100
--   409–424   16    wait_bucket_500
--   426–441   16    wait_bucket_1000
--   443–458   16    wait_bucket_2500
--   460–475   16    wait_bucket_5000
--   477–492   16    wait_bucket_10000
--   493–511         spaces
--
-- One string.format writes it; one string.match reads and checks the form
-- of every field at once (cheaper than field by field). Both are literals:
-- the script builds nothing at load (it also loads as a Redis function,
-- where the string library is not there yet at load time).

local HEADER_FIELDS = 'PACER2 %03d %07d %016d %02d %d %s %016d %+013d %08d %016d'
  .. ' %016d %016d %016d %016d %016d'
local PADDING = '                                                         ' -- bytes 199–255
-- A fixed-rate bucket's header ends in the padding (string.format ignores
-- the nine adaptive values it is given too); an adaptive one's in its fields.
local HEADER_FORMAT = HEADER_FIELDS .. PADDING
local ADAPTIVE_HEADER_FORMAT = HEADER_FIELDS .. ' %03d %03d %016d %05d %05d %05d %05d %d %d    '

-- Bytes 199–255 of an adaptive bucket's header: a space, nine captures,
-- then the spaces to the end.
local ADAPTIVE_PATTERN = '^ (%d%d%d) (%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d) (%d%d%d%d%d) (%d%d%d%d%d) (%d%d%d%d%d) ([01]) ([01])    $'

-- Fifteen captures, in the table's order; the match ends at byte 199 (the
-- space after the last field), so the padding is compared on its own.
local HEADER_PATTERN = '^PACER2 (%d%d%d) (%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d) ([01]) '
  .. '([0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
  .. '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) ([+-]%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '

-- The second block (bytes 256–511): fourteen 16-digit counts, then 19
-- spaces; its pattern, fourteen captures and the spaces to the end.
local MORE_FORMAT = '%016d %016d %016d %016d %016d %016d %016d %016d %016d %016d %016d %016d %016d %016d'
  .. '                   '
local D16 = '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d)'
local MORE_PATTERN = '^' .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' '
  .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' ' .. D16 .. ' '
  .. D16 .. ' ' .. D16 .. '                   $'

local POLICY_CODE = { refund = 0, strict = 1 }

-- A bucket is one flat table: its configuration (the fields parse_config
-- gives), its secret, its state (high_water_ms, tokens_units, seq: so the
-- bucket itself is the state the rule reads), its serial and its counters.
-- One table, not one per part: this script runs on every call, and every
-- table is garbage to collect.

-- The header's 512 bytes for `bucket`: the first block, then the second.
-- The header's first block (bytes 0–255): the configuration, the state,
-- the first counters and the control word.
local function encode_first_block(bucket)
  local format = HEADER_FORMAT
  if bucket.adaptive_floor_per_min > 0 then
    format = ADAPTIVE_HEADER_FORMAT
  end
  return string.format(
    format,
    bucket.rate_per_min,
    bucket.burst,
    bucket.idle_timeout_ms,
    bucket.max_retries,
    POLICY_CODE[bucket.release_policy],
    bucket.secret,
    bucket.high_water_ms,
    bucket.tokens_units,
    bucket.seq,
    bucket.serial,
    bucket.admitted,
    bucket.refused,
    bucket.booked,
    bucket.released,
    bucket.release_refused,
    bucket.adaptive_floor_per_min,
    bucket.adaptive_ceiling_per_min,
    bucket.origin_ms,
    bucket.window,
    bucket.opened,
    bucket.opened_before,
    bucket.limit_per_min,
    bucket.probing,
    bucket.again
  )
end

-- The header's second block (bytes 256–511): the counts beside those.
local function encode_second_block(bucket)
  return string.format(
    MORE_FORMAT,
    bucket.admitted_after_wait,
    bucket.shaped,
    bucket.redeemed,
    bucket.upstream_opened,
    bucket.upstream_throttled,
    bucket.wait_ms_total,
    bucket.wait_bucket_10,
    bucket.wait_bucket_50,
    bucket.wait_bucket_100,
    bucket.wait_bucket_500,
    bucket.wait_bucket_1000,
    bucket.wait_bucket_2500,
    bucket.wait_bucket_5000,
    bucket.wait_bucket_10000
  )
end

-- A 16-digit field: its value, or nil at or above 2^52 (the shorter fields
-- cannot reach it).
local function big_field(text)
  local value = tonumber(text)
  if value < TWO_POW_52 then
    return value
  end
  return nil
end

-- Bytes 199–255 of a header, into `bucket`: for a fixed-rate bucket
-- (spaces) 0, 0, and a zero control word; for an adaptive one its range
-- and control word, checked for form and for the ranges the commands write
-- (a floor and a ceiling of at least 1, stored_config_ok checking the rest
-- of the range; the origin below 2^52 + WINDOW_MS (a pause after a search
-- moves it a minute past a clock below 2^52), the minute and the counts within 16
-- bits, the limit at most the ceiling, the two flags 0 or 1); otherwise the
-- "not a pacer bucket" error.
local function decode_adaptive(key, tail, bucket)
  local floor, ceiling, origin, window, opened, before, limit, probing, again = 0, 0, 0, 0, 0, 0, 0, 0, 0
  if tail ~= PADDING then
    floor, ceiling, origin, window, opened, before, limit, probing, again = string.match(tail, ADAPTIVE_PATTERN)
    if floor == nil then
      not_a_bucket(key)
    end
    floor, ceiling, origin = tonumber(floor), tonumber(ceiling), tonumber(origin)
    window, opened, before = tonumber(window), tonumber(opened), tonumber(before)
    limit, probing, again = tonumber(limit), tonumber(probing), tonumber(again)
    if
      floor < 1
      or ceiling < 1
      or origin >= TWO_POW_52 + WINDOW_MS
      or window > COUNT_CAP
      or opened > COUNT_CAP
      or before > COUNT_CAP
      or limit > ceiling
    then
      not_a_bucket(key)
    end
  end
  bucket.adaptive_floor_per_min, bucket.adaptive_ceiling_per_min = floor, ceiling
  bucket.raw_ceiling, bucket.origin_ms = ceiling, origin
  bucket.window, bucket.opened, bucket.opened_before = window, opened, before
  bucket.limit_per_min, bucket.probing, bucket.again = limit, probing, again
end

-- The second block (bytes 256–511) into `bucket`: fourteen counts in
-- form and below 2^52, the gaps and the padding spaces; otherwise the "not
-- a pacer bucket" error.
local function decode_more(key, block, bucket)
  local after_wait, shaped, redeemed, opened, throttled, total, b10, b50, b100, b500, b1000, b2500, b5000, b10000 =
    string.match(block, MORE_PATTERN)
  if after_wait == nil then
    not_a_bucket(key)
  end
  bucket.admitted_after_wait, bucket.shaped = big_field(after_wait), big_field(shaped)
  bucket.redeemed, bucket.upstream_opened = big_field(redeemed), big_field(opened)
  bucket.upstream_throttled, bucket.wait_ms_total = big_field(throttled), big_field(total)
  bucket.wait_bucket_10, bucket.wait_bucket_50 = big_field(b10), big_field(b50)
  bucket.wait_bucket_100, bucket.wait_bucket_500 = big_field(b100), big_field(b500)
  bucket.wait_bucket_1000, bucket.wait_bucket_2500 = big_field(b1000), big_field(b2500)
  bucket.wait_bucket_5000, bucket.wait_bucket_10000 = big_field(b5000), big_field(b10000)
  if
    not (
      bucket.admitted_after_wait and bucket.shaped and bucket.redeemed and bucket.upstream_opened
      and bucket.upstream_throttled and bucket.wait_ms_total and bucket.wait_bucket_10
      and bucket.wait_bucket_50 and bucket.wait_bucket_100 and bucket.wait_bucket_500
      and bucket.wait_bucket_1000 and bucket.wait_bucket_2500 and bucket.wait_bucket_5000
      and bucket.wait_bucket_10000
    )
  then
    not_a_bucket(key)
  end
end

-- The bucket the header `raw` holds, or the "not a pacer bucket" error:
-- too short, another magic, a field out of form, a number at or above
-- 2^52, a zero burst, tokens above capacity, adaptive fields out of form
-- or range. Whether Params::plan accepts the stored configuration is
-- checked by the caller (stored_config_ok): an admission whose own,
-- already checked, configuration is the same needs no second check.
local function decode_header(key, raw)
  local rate, burst, idle, retries, policy, secret, high_water, tokens, seq, serial,
    admitted, refused, booked, released, release_refused = string.match(raw, HEADER_PATTERN)
  if rate == nil then
    not_a_bucket(key)
  end
  idle, high_water, serial = big_field(idle), big_field(high_water), big_field(serial)
  admitted, refused, booked = big_field(admitted), big_field(refused), big_field(booked)
  released, release_refused = big_field(released), big_field(release_refused)
  burst, tokens, seq = tonumber(burst), tonumber(tokens), tonumber(seq)
  if
    not (idle and high_water and serial and admitted and refused and booked and released and release_refused)
    or burst == 0
    or tokens > burst * UNITS_PER_TOKEN
    or seq >= SEQ_MODULUS
  then
    not_a_bucket(key)
  end
  local bucket = {
    rate_per_min = tonumber(rate),
    burst = burst,
    raw_burst = burst,
    idle_timeout_ms = idle,
    max_retries = tonumber(retries),
    release_policy = (policy == '0') and 'refund' or 'strict',
    secret = secret,
    high_water_ms = high_water,
    tokens_units = tokens,
    seq = seq,
    serial = serial,
    admitted = admitted,
    refused = refused,
    booked = booked,
    released = released,
    release_refused = release_refused,
  }
  decode_adaptive(key, string.sub(raw, 200, FIRST_BLOCK_LEN), bucket)
  local second = string.sub(raw, FIRST_BLOCK_LEN + 1, HEADER_LEN)
  decode_more(key, second, bucket)
  -- Kept while none of its counts changes: store_bucket then writes the
  -- first block alone.
  bucket.second_block = second
  return bucket
end

-- Params::plan accepts the stored configuration, or the "not a pacer
-- bucket" error.
local function stored_config_ok(key, bucket)
  if config_error(bucket) ~= nil then
    not_a_bucket(key)
  end
end

-- ---------------------------------------------------------------------------
-- Memory between calls. Loaded as a function library, this file runs once
-- and these tables live until the library is replaced; by EVAL they start
-- empty on every call and help nothing. They hold only what a pure function
-- of the call's own bytes gave before, so a hit answers exactly what the
-- work it skips would have: the planned configuration by its argument texts
-- (only configurations that passed every check), and per key the
-- header this library last wrote there with the bucket it encodes (a key
-- whose bytes are anything else, written by the module, another client or
-- edited by hand, is decoded in full). Each is emptied when it holds 1000
-- entries, so memory stays bounded whatever the keys and arguments.

local CACHE_LIMIT = 1000
-- Plans of fixed-rate calls by their five texts, of calls with ADAPT by
-- its two and the five: two tables, so that a key of one kind never meets
-- unchecked texts of the other kind that join to the same text.
local plans, adaptive_plans, plans_held = {}, {}, 0
local written, buckets, written_held = {}, {}, 0

-- The configuration arguments as one text (none holds a space once
-- checked, so the spaces part them unambiguously), and the table it keys.
local function plan_key(argv, adapt)
  local five = argv[2] .. ' ' .. argv[3] .. ' ' .. argv[4] .. ' ' .. argv[5] .. ' ' .. argv[6]
  if adapt then
    return argv[adapt] .. ' ' .. argv[adapt + 1] .. ' ' .. five, adaptive_plans
  end
  return five, plans
end

local function remember_plan(argv, adapt, config, params)
  if plans_held >= CACHE_LIMIT then
    plans, adaptive_plans, plans_held = {}, {}, 0
  end
  plans_held = plans_held + 1
  local key, held = plan_key(argv, adapt)
  held[key] = { config = config, params = params }
end

-- A new bucket table with `held`'s fields (a new bucket starts as a copy
-- of its configuration, which the plans table may hold).
local function copy_bucket(held)
  return {
    rate_per_min = held.rate_per_min,
    burst = held.burst,
    raw_burst = held.raw_burst,
    idle_timeout_ms = held.idle_timeout_ms,
    max_retries = held.max_retries,
    release_policy = held.release_policy,
    secret = held.secret,
    high_water_ms = held.high_water_ms,
    tokens_units = held.tokens_units,
    seq = held.seq,
    serial = held.serial,
    admitted = held.admitted,
    refused = held.refused,
    booked = held.booked,
    released = held.released,
    release_refused = held.release_refused,
    adaptive_floor_per_min = held.adaptive_floor_per_min,
    adaptive_ceiling_per_min = held.adaptive_ceiling_per_min,
    raw_ceiling = held.raw_ceiling,
    origin_ms = held.origin_ms,
    window = held.window,
    opened = held.opened,
    opened_before = held.opened_before,
    limit_per_min = held.limit_per_min,
    probing = held.probing,
    again = held.again,
    admitted_after_wait = held.admitted_after_wait,
    shaped = held.shaped,
    redeemed = held.redeemed,
    upstream_opened = held.upstream_opened,
    upstream_throttled = held.upstream_throttled,
    wait_ms_total = held.wait_ms_total,
    wait_bucket_10 = held.wait_bucket_10,
    wait_bucket_50 = held.wait_bucket_50,
    wait_bucket_100 = held.wait_bucket_100,
    wait_bucket_500 = held.wait_bucket_500,
    wait_bucket_1000 = held.wait_bucket_1000,
    wait_bucket_2500 = held.wait_bucket_2500,
    wait_bucket_5000 = held.wait_bucket_5000,
    wait_bucket_10000 = held.wait_bucket_10000,
  }
end

-- Writes `bucket`'s header to `key` and remembers both (the caller does
-- not change `bucket` after this). A bucket whose second block is the one
-- the key holds (`second_block`: none of its counts changed since it was
-- read, as on a refusal or an admission at once) has its first block
-- written alone; the key's bytes are the same either way.
local function store_bucket(key, bucket)
  local first, second = encode_first_block(bucket), bucket.second_block
  if second then
    write('SETRANGE', key, 0, first)
  else
    second = encode_second_block(bucket)
    write('SETRANGE', key, 0, first .. second)
    bucket.second_block = second
  end
  local header = first .. second
  if written[key] == nil then
    if written_held >= CACHE_LIMIT then
      written, buckets, written_held = {}, {}, 0
    end
    written_held = written_held + 1
  end
  written[key], buckets[key] = header, bucket
end

-- The bucket at `key`, or nil when there is no key. Another type's key is
-- Redis's own WRONGTYPE error, passed through as it came.
local function load_bucket(key)
  local raw = redis.pcall('GETRANGE', key, 0, HEADER_LEN - 1)
  if type(raw) == 'table' and raw.err then
    error(setmetatable({ redis_error = raw }, PacerError), 0)
  end
  if raw == written[key] then
    -- The header this library wrote last: its bucket, taken out of memory
    -- (the caller changes it, and a call that fails before store_bucket
    -- leaves nothing behind that the key does not say).
    local bucket = buckets[key]
    written[key], buckets[key], written_held = nil, nil, written_held - 1
    return bucket
  end
  if raw == '' and redis.call('EXISTS', key) == 0 then
    return nil
  end
  if string.sub(raw, 1, 6) == 'PACER1' then
    fail(fmt(
      "key '%s' holds a bucket of key format 1 (PACER1), which this version does not read; "
        .. 'delete the key and it is created again in format 2',
      shown(key)
    ))
  end
  return decode_header(key, raw)
end

-- The bucket at `key`, checked whole, or the "no bucket" error.
local function load_existing_bucket(key)
  local bucket = load_bucket(key)
  if bucket == nil then
    fail(fmt("no bucket at key '%s'", shown(key)))
  end
  stored_config_ok(key, bucket)
  return bucket
end

-- ---------------------------------------------------------------------------
-- The clock.

-- The server's clock, ms: TIME's seconds · 1000 + ⌊µs / 1000⌋ (about 2^40.6
-- in 2026), and TIME's two texts for a new bucket's secret.
local function server_time()
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + floor_div(tonumber(time[2]), 1000)
  return now_ms, time[1], time[2]
end

-- The clock this call decides at: the server's, or with `AT <ms>` at
-- argv[at] (its word, then its number, then whether this copy allows it:
-- only a test copy does) the caller's.
local function read_clock(argv, at)
  if at == nil then
    return (server_time())
  end
  if string.upper(argv[at]) ~= 'AT' then
    fail(fmt("unknown argument '%s'", shown(argv[at])))
  end
  local at_ms = whole_argument(argv[at + 1], 'AT')
  if not TEST_CLOCK then
    fail('AT needs a server started for tests')
  end
  return at_ms
end

-- ---------------------------------------------------------------------------
-- Tickets (docs/redis.md, "Tickets"):
-- <serial>.<seq>.<debit_units>.<slot_ms>.<mac>

local function mac(key, secret, serial, seq, debit_units, slot_ms)
  local text = fmt('%s:%s:%d:%d:%d:%d', secret, key, serial, seq, debit_units, slot_ms)
  return string.sub(redis.sha1hex(text), 1, 16)
end

local function ticket_text(key, secret, serial, seq, debit_units, slot_ms)
  local tag = mac(key, secret, serial, seq, debit_units, slot_ms)
  return fmt('%d.%d.%d.%d.%s', serial, seq, debit_units, slot_ms, tag)
end

-- The ticket `text` names, or the "malformed ticket" error: five fields,
-- canonical decimals in range (serial below 2^52, seq below 2^24, debit
-- 1–60000, slot below 2^53: a slot is at + wait < 2^52 + 2^20), and 16
-- lowercase hex digits.
local function parse_ticket(text)
  local serial, seq, debit_units, slot_ms, tag =
    string.match(text, '^([^.]*)%.([^.]*)%.([^.]*)%.([^.]*)%.([^.]*)$')
  if serial then
    serial = parse_whole(serial)
    seq = parse_whole(seq, SEQ_MODULUS)
    debit_units = parse_whole(debit_units, UNITS_PER_TOKEN + 1)
    slot_ms = parse_whole(slot_ms, TWO_POW_53)
    if
      serial
      and seq
      and debit_units
      and debit_units >= 1
      and slot_ms
      and #tag == 16
      and string.match(tag, '^[0-9a-f]+$')
    then
      return {
        serial = serial,
        seq = seq,
        debit_units = debit_units,
        slot_ms = slot_ms,
        mac = tag,
      }
    end
  end
  fail(fmt("malformed ticket '%s'", shown(text)))
end

-- The bit marking ticket `serial` released.
local function spent_bit(serial)
  return SPENT_BITMAP_BIT + math.fmod(serial, SPENT_WINDOW)
end

-- Fails unless `bucket` can issue a ticket: its next serial is below
-- 2^52 − 1, the largest its field holds (the last ticket is 2^52 − 2).
local function serial_left(key, bucket)
  if bucket.serial >= LARGEST then
    fail(fmt("bucket '%s' has issued its last ticket (serial %d); create a new bucket", shown(key), LARGEST - 1))
  end
end

-- Numbers a debit with the bucket's next serial: its ticket text. The
-- serial's bit is cleared when the ring has wrapped onto an older ticket's.
local function issue_ticket(key, bucket, seq, debit_units, slot_ms)
  serial_left(key, bucket)
  local serial = bucket.serial
  bucket.serial = serial + 1
  if serial >= SPENT_WINDOW then
    write('SETBIT', key, spent_bit(serial), 0) -- a new ticket is unspent
  end
  return ticket_text(key, bucket.secret, serial, seq, debit_units, slot_ms)
end

-- The checks a release or redeem makes, in the documented order.
local function check_ticket(key, bucket, ticket)
  local expected = mac(key, bucket.secret, ticket.serial, ticket.seq, ticket.debit_units, ticket.slot_ms)
  if ticket.mac ~= expected or ticket.serial >= bucket.serial then
    fail('ticket not issued by this bucket')
  end
  if ticket.serial < bucket.serial - SPENT_WINDOW then
    fail('ticket expired')
  end
  if redis.call('GETBIT', key, spent_bit(ticket.serial)) == 1 then
    fail('ticket already released')
  end
end

-- ---------------------------------------------------------------------------
-- Commands. Each parses and checks everything, then writes (SETRANGE for
-- the header, SETBIT for the bitmap), then replies. The checks run in the
-- module's order (redis/src/bucket.rs, `parse`): the arity; the arguments
-- left to right, a configuration's ranges right after its numbers; AT's
-- word, its number and whether it is allowed; then the key.

-- The call's shape: the op (argv[1]) and `fixed` arguments, then (where
-- `adaptable`: CREATE, RESERVE, BOOK) perhaps `ADAPT floor ceiling`, then
-- nothing or `AT <ms>`. Returns the index of ADAPT's floor and of AT's
-- word (each nil when absent), or fails with the arity error.
local function layout(op, argv, fixed, adaptable)
  local extra = #argv - 1 - fixed
  local adapt
  if adaptable and (extra == 3 or extra == 5) and string.upper(argv[fixed + 2]) == 'ADAPT' then
    adapt = fixed + 3
    extra = extra - 3
  end
  if extra ~= 0 and extra ~= 2 then
    fail('wrong number of arguments for ' .. op)
  end
  if extra == 2 then
    return adapt, #argv - 1
  end
  return adapt, nil
end

-- One more of a counter, saturating at 2^52 − 1: the header never holds a
-- number its decoding refuses.
local function count(n)
  return min(n + 1, LARGEST)
end

-- `amount` more of a counter, saturating at 2^52 − 1 like count (both
-- below 2^52: the sum is exact).
local function count_by(n, amount)
  return min(n + amount, LARGEST)
end

-- The second block's counts of one admission, as the core's Counters
-- tallies it (core/src/counters.rs, tally_admission): a wait above 0 is
-- counted, summed and put in the bucket of the first bound at or above it
-- (none above the last); shaped and overflow are shaped, booked (a
-- redemption) is redeemed.
local function tally_admission(bucket, wait, path)
  if wait > 0 then
    bucket.second_block = nil
    bucket.admitted_after_wait = count(bucket.admitted_after_wait)
    bucket.wait_ms_total = count_by(bucket.wait_ms_total, wait)
    for i = 1, #WAIT_BOUNDS_MS do
      if wait <= WAIT_BOUNDS_MS[i] then
        local field = WAIT_BUCKET_FIELDS[i]
        bucket[field] = count(bucket[field])
        break
      end
    end
  end
  if path == 'shaped' or path == 'overflow' then
    bucket.second_block = nil
    bucket.shaped = count(bucket.shaped)
  elseif path == 'booked' then
    bucket.second_block = nil
    bucket.redeemed = count(bucket.redeemed)
  end
end

-- The bucket's state becomes `next_state` (nil: unchanged).
local function set_state(bucket, next_state)
  if next_state then
    bucket.high_water_ms = next_state.high_water_ms
    bucket.tokens_units = next_state.tokens_units
    bucket.seq = next_state.seq
  end
end

-- PACER.CREATE, PACER.RESERVE and PACER.BOOK: argv is the op, the config (and,
-- for book, retries_left), then [AT ms]. Create only makes the bucket:
-- 1 when it did, 0 (nothing written) when the same bucket was there.
local function admission_command(key, op, argv)
  local fixed = (op == 'book') and 6 or 5
  local adapt, at = layout(op, argv, fixed, true)
  local plan_text, plan_table = plan_key(argv, adapt)
  local held = plan_table[plan_text]
  local config, params
  if held then
    config, params = held.config, held.params
  else
    config = parse_config(argv, 2, adapt)
    local problem = config_error(config)
    if problem then
      fail(problem)
    end
    params = plan(config)
    remember_plan(argv, adapt, config, params)
  end
  local retries_left
  if op == 'book' then
    retries_left = whole_argument(argv[7], 'retries_left')
  end
  local now_ms = read_clock(argv, at)

  local bucket = load_bucket(key)
  local created = bucket == nil
  if bucket == nil then
    -- Created full at now_ms (Params::initial_state), with a secret from
    -- the server's TIME.
    local _, seconds, micros = server_time()
    bucket = copy_bucket(config) -- the configuration's fields; the rest below
    bucket.raw_burst = bucket.burst -- as decoding the stored header gives it
    bucket.secret = string.sub(redis.sha1hex(key .. ':' .. seconds .. ':' .. micros), 1, 16)
    bucket.high_water_ms, bucket.tokens_units, bucket.seq = now_ms, params.capacity_units, 0
    bucket.serial = 0
    bucket.admitted, bucket.refused, bucket.booked = 0, 0, 0
    bucket.released, bucket.release_refused = 0, 0
    -- Params::initial_control: searching from the configured rate since
    -- now, nothing counted (a fixed-rate bucket keeps zeros).
    bucket.origin_ms, bucket.limit_per_min = 0, 0
    if config.adaptive_floor_per_min > 0 then
      bucket.origin_ms, bucket.limit_per_min = now_ms, config.rate_per_min
    end
    bucket.window, bucket.opened, bucket.opened_before = 0, 0, 0
    bucket.probing, bucket.again = 0, 0
    bucket.second_block = nil
    bucket.admitted_after_wait, bucket.shaped, bucket.redeemed = 0, 0, 0
    bucket.upstream_opened, bucket.upstream_throttled, bucket.wait_ms_total = 0, 0, 0
    for i = 1, #WAIT_BUCKET_FIELDS do
      bucket[WAIT_BUCKET_FIELDS[i]] = 0
    end
  elseif not same_config(bucket, config) then
    stored_config_ok(key, bucket)
    fail(fmt(
      "bucket '%s' was created with %s; this call has %s",
      shown(key),
      config_text(bucket),
      config_text(config)
    ))
  end

  if op == 'create' then
    if not created then
      return 0
    end
    store_bucket(key, bucket)
    return 1
  end

  local next_state, answer
  params = in_force(params, bucket, now_ms)
  if op == 'book' then
    next_state, answer = reserve_or_book(params, bucket, now_ms, retries_left)
  else
    next_state, answer = reserve(params, bucket, now_ms)
  end

  -- Validation is over: write.
  local ticket = false
  local slot_ms = answer.slot_ms or 0
  if answer.seq then
    ticket = issue_ticket(key, bucket, answer.seq, answer.debit_units, slot_ms)
  end
  set_state(bucket, next_state)
  bucket[answer.kind] = count(bucket[answer.kind]) -- its counter: admitted, refused or booked
  if answer.kind == 'admitted' then
    tally_admission(bucket, answer.wait_ms, answer.path)
  end
  store_bucket(key, bucket)

  local regressed = flag(answer.clock_regressed)
  if answer.kind == 'admitted' then
    return { 'admitted', answer.wait_ms, ticket, answer.path, regressed }
  elseif answer.kind == 'booked' then
    return { 'booked', answer.retry_after_s, ticket, slot_ms, regressed }
  end
  return { 'refused', answer.retry_after_s, answer.required_wait_ms, regressed }
end

-- What PACER.RELEASE and PACER.REDEEM share: argv is the op, the ticket, then
-- [AT ms]; the ticket is checked against the existing bucket (docs/redis.md,
-- "Tickets", in order). Gives the ticket, the clock, the bucket and the
-- parameters in force.
local function ticket_command(op, key, argv)
  local _, at = layout(op, argv, 1, false)
  local now_ms = read_clock(argv, at)
  local bucket = load_existing_bucket(key)
  local ticket = parse_ticket(argv[2])
  check_ticket(key, bucket, ticket)
  return ticket, now_ms, bucket, in_force(plan(bucket), bucket, now_ms)
end

-- PACER.RELEASE.
local function release_command(key, argv)
  local ticket, now_ms, bucket, params = ticket_command('release', key, argv)

  local next_state, refunded = release(params, bucket, ticket, now_ms)
  -- Spent either way, even when strict refused the refund.
  write('SETBIT', key, spent_bit(ticket.serial), 1)
  set_state(bucket, next_state)
  if refunded then
    bucket.released = count(bucket.released)
  else
    bucket.release_refused = count(bucket.release_refused)
  end
  store_bucket(key, bucket)
  return flag(refunded)
end

-- PACER.REDEEM: the ticket is a booking. Admitted, the booking is spent
-- and the admission gets a ticket of its own (the booking's seq and debit,
-- slot 0), counted in admitted; not yet, nothing is written.
local function redeem_command(key, argv)
  local ticket, now_ms, bucket = ticket_command('redeem', key, argv)
  if ticket.slot_ms == 0 then
    fail('not a booking')
  end
  -- As the core's Pacer::redeem: the planned bound (a search's bound in
  -- force is 0; a booking made earlier is kept).
  local answer = redeem(plan(bucket), ticket.slot_ms, now_ms)
  if answer.kind ~= 'admitted' then
    return { 'notyet', answer.retry_after_s, argv[2] }
  end
  serial_left(key, bucket) -- before the first write
  write('SETBIT', key, spent_bit(ticket.serial), 1)
  local admission = issue_ticket(key, bucket, ticket.seq, ticket.debit_units, 0)
  bucket.admitted = count(bucket.admitted)
  tally_admission(bucket, answer.wait_ms, 'booked')
  store_bucket(key, bucket)
  return { 'admitted', answer.wait_ms, admission, 'booked', 0 }
end

-- PACER.INFO: argv is the op, then [AT ms]. Read-only; the mode, the debt
-- floor and the level are those of the parameters in force.
local function info_command(key, argv)
  local _, at = layout('info', argv, 0, false)
  local now_ms = read_clock(argv, at)
  local bucket = load_existing_bucket(key)
  local params = in_force(plan(bucket), bucket, now_ms)
  local at_ms = effective_now(bucket, now_ms) -- max(now, high-water mark)
  return {
    'rate_per_min', bucket.rate_per_min,
    'burst', bucket.burst,
    'idle_timeout_ms', bucket.idle_timeout_ms,
    'max_retries', bucket.max_retries,
    'release_policy', bucket.release_policy,
    'mode', params.mode,
    'wait_bound_ms', params.bound_ms,
    'capacity_units', params.capacity_units,
    'max_debt_units', params.max_debt_units,
    'high_water_ms', bucket.high_water_ms,
    'tokens_units', bucket.tokens_units,
    'level_units', refill(params, bucket, at_ms),
    'seq', bucket.seq,
    'serial', bucket.serial,
    'admitted', bucket.admitted,
    'refused', bucket.refused,
    'booked', bucket.booked,
    'released', bucket.released,
    'release_refused', bucket.release_refused,
    'now_ms', now_ms,
    'rate_in_force', params.rate,
    'adaptive_floor_per_min', bucket.adaptive_floor_per_min,
    'adaptive_ceiling_per_min', bucket.adaptive_ceiling_per_min,
    'origin_ms', bucket.origin_ms,
    'window', bucket.window,
    'opened', bucket.opened,
    'opened_before', bucket.opened_before,
    'limit_per_min', bucket.limit_per_min,
    'probing', bucket.probing,
    'again', bucket.again,
    'admitted_after_wait', bucket.admitted_after_wait,
    'shaped', bucket.shaped,
    'redeemed', bucket.redeemed,
    'upstream_opened', bucket.upstream_opened,
    'upstream_throttled', bucket.upstream_throttled,
    'wait_ms_total', bucket.wait_ms_total,
    'wait_bucket_10', bucket.wait_bucket_10,
    'wait_bucket_50', bucket.wait_bucket_50,
    'wait_bucket_100', bucket.wait_bucket_100,
    'wait_bucket_500', bucket.wait_bucket_500,
    'wait_bucket_1000', bucket.wait_bucket_1000,
    'wait_bucket_2500', bucket.wait_bucket_2500,
    'wait_bucket_5000', bucket.wait_bucket_5000,
    'wait_bucket_10000', bucket.wait_bucket_10000,
  }
end

-- PACER.OBSERVE: argv is the op, the outcome (opened or throttled), then
-- [AT ms]. The rate in force after it; on an adaptive bucket it counts the
-- outcome and writes the control word when the law gives one (a throttle
-- within the hold writes its count alone); a fixed-rate bucket's (or one
-- with pacing disabled) writes nothing.
local function observe_command(key, argv)
  local _, at = layout('observe', argv, 1, false)
  local outcome = argv[2]
  if outcome ~= 'opened' and outcome ~= 'throttled' then
    fail(fmt("outcome must be opened or throttled, got '%s'", shown(outcome)))
  end
  local now_ms = read_clock(argv, at)
  local bucket = load_existing_bucket(key)
  local counted, rate = observe(plan(bucket), bucket, outcome, now_ms)
  if counted then
    -- Every observation of an adaptive bucket is counted (a fixed-rate
    -- bucket's writes nothing).
    local field = 'upstream_' .. outcome
    bucket.second_block = nil
    bucket[field] = count(bucket[field])
    store_bucket(key, bucket)
  end
  return rate
end

-- ---------------------------------------------------------------------------
-- Entry points: the script, `EVALSHA <sha> 1 <key> <op> <arguments…>`, or
-- the same text loaded as a Redis function library (docs/redis.md: with a
-- first line `#!lua name=pacer`), `FCALL pacer 1 <key> <op> <arguments…>`,
-- and for info alone `FCALL_RO pacer_ro 1 <key> info [AT <ms>]` (a
-- function flagged no-writes: it runs on replicas too).

-- `read_only`: the call came through the read-only function, which takes
-- info only (every other op may write).
local function main(keys, argv, read_only)
  if #keys ~= 1 then
    fail(fmt('the script takes exactly 1 key, got %d', #keys))
  end
  local key = keys[1]
  local op = string.lower(argv[1] or '')
  if op == 'info' then
    return info_command(key, argv)
  elseif op ~= 'create' and op ~= 'reserve' and op ~= 'book'
    and op ~= 'release' and op ~= 'redeem' and op ~= 'observe'
  then
    fail(fmt("unknown op '%s'", shown(argv[1] or '')))
  elseif read_only then
    fail(fmt("op '%s' may write: the read-only function takes only info", op))
  elseif op == 'release' then
    return release_command(key, argv)
  elseif op == 'redeem' then
    return redeem_command(key, argv)
  elseif op == 'observe' then
    return observe_command(key, argv)
  end
  return admission_command(key, op, argv)
end

-- main's reply; a failure as the error reply "ERR pacer: <message>".
local function run(keys, argv, read_only)
  local ok, result = pcall(main, keys, argv, read_only)
  if ok then
    return result
  end
  if getmetatable(result) ~= PacerError then
    error(result, 0) -- a fault in this script: Redis reports it
  end
  if result.redis_error then
    return result.redis_error -- Redis's own error (WRONGTYPE, READONLY, OOM), as it came
  end
  return redis.error_reply('ERR pacer: ' .. result.message)
end

-- The library's function names: FUNCTION_NAME takes every op, and
-- FUNCTION_NAME .. '_ro' (flag no-writes: FCALL_RO, replicas) info alone.
local FUNCTION_NAME = 'pacer'

if redis.register_function then
  -- FUNCTION LOAD: runs once.
  redis.register_function(FUNCTION_NAME, run)
  redis.register_function({
    function_name = FUNCTION_NAME .. '_ro',
    callback = function(keys, argv)
      return run(keys, argv, true)
    end,
    flags = { 'no-writes' },
  })
else
  return run(KEYS, ARGV) -- EVAL / EVALSHA: runs every call
end
