-- pacer.lua: the pacer's rule in Lua, for Redis services that load no
-- modules (docs/redis.md). It is a second implementation of
-- core/src/pacer.rs and core/src/budget.rs, kept honest by the differential
-- test (redis/tests/differential.rs) and the edge tests in
-- redis/tests/lua_exact.rs. It loads two ways:
--
--   a function library (Redis 7.0+; the faster way):
--     { echo '#!lua name=pacer'; cat redis/pacer.lua; } | redis-cli -x FUNCTION LOAD REPLACE
--     FCALL pacer 1 <key> <op> <arguments…>
--   a script:
--     SCRIPT LOAD "$(cat redis/pacer.lua)"
--     EVALSHA <sha1> 1 <key> <op> <arguments…>
--
-- op is create, reserve, book, release, redeem or info; the arguments are those of
-- the module's command of that name, after the key.
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

local HEADER_LEN = 256 -- bytes 0–255: the header
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

-- The five configuration arguments from args[first], in order: each number
-- is checked for form as it is read; ranges are Params::plan's (plan below).
local function parse_config(args, first)
  local rate_per_min = whole_argument(args[first], 'rate_per_min')
  local burst = whole_argument(args[first + 1], 'burst')
  local idle_timeout_ms = whole_argument(args[first + 2], 'idle_timeout_ms')
  local max_retries = whole_argument(args[first + 3], 'max_retries')
  local policy = args[first + 4]
  if policy ~= 'refund' and policy ~= 'strict' then
    fail(fmt("release_policy must be refund or strict, got '%s'", shown(policy)))
  end
  return {
    rate_per_min = rate_per_min,
    -- Params::plan: a burst of 0 means 1; stored and compared as 1.
    burst = (burst == 0) and 1 or burst,
    raw_burst = burst,
    idle_timeout_ms = idle_timeout_ms,
    max_retries = max_retries,
    release_policy = policy,
  }
end

-- Whether two configurations are the same bucket's (burst as stored: 0 is 1).
local function same_config(a, b)
  return a.rate_per_min == b.rate_per_min
    and a.burst == b.burst
    and a.idle_timeout_ms == b.idle_timeout_ms
    and a.max_retries == b.max_retries
    and a.release_policy == b.release_policy
end

local function config_text(config)
  return fmt(
    'rate_per_min=%d burst=%d idle_timeout_ms=%d max_retries=%d release_policy=%s',
    config.rate_per_min,
    config.burst,
    config.idle_timeout_ms,
    config.max_retries,
    config.release_policy
  )
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
  return nil
end

-- Params::plan, for a config config_error accepts.
local function plan(config)
  local rate = config.rate_per_min
  local max_retries = config.max_retries
  local bound_ms = wait_bound_ms(config.idle_timeout_ms, max_retries)
  local mode
  if not pacing_enabled(rate, bound_ms) then
    mode = 'disabled'
  elseif can_refuse(rate, max_retries, bound_ms) then
    mode = 'refusing'
  elseif max_retries > 0 then
    mode = 'shaping-low-rate'
  else
    mode = 'shaping-no-retry'
  end
  return {
    rate = rate,
    max_retries = max_retries,
    capacity_units = config.burst * UNITS_PER_TOKEN, -- ≤ 6·10^10
    max_debt_units = bound_ms * rate, -- ≤ 15000 · 600
    bound_ms = bound_ms,
    refusal_hint_s = hint_cap_s(bound_ms),
    mode = mode,
    strict = config.release_policy == 'strict',
  }
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
  if params.mode == 'disabled' then
    return nil, admitted_free('disabled', false)
  end
  local at_ms, clock_regressed, tokens = view(params, state, now_ms)
  local kind, wait, units, path = decide(params, tokens)
  if kind == 'free' then
    return nil, admitted_free('overflow', clock_regressed)
  elseif kind == 'debit' then
    return debited(state, at_ms, tokens, wait, units, path, clock_regressed)
  elseif wait > horizon_ms(params, retries_left) then
    return refusal(params, wait, clock_regressed)
  end
  -- A place in line: the token the slot will use.
  local next_state, seq = debit(state, at_ms, tokens, UNITS_PER_TOKEN)
  return next_state,
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
-- The key (docs/redis.md, "The key"): a 256-byte header of fixed-width
-- fields, each right-aligned with leading zeros, one space between them,
-- spaces from byte 199 to 255; then the spent bitmap.
--
--   bytes    width  field
--   0–5        6    PACER1
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
-- One string.format writes it; one string.match reads and checks the form
-- of every field at once (cheaper than field by field). Both are literals:
-- the script builds nothing at load (it also loads as a Redis function,
-- where the string library is not there yet at load time).

local HEADER_FORMAT = 'PACER1 %03d %07d %016d %02d %d %s %016d %+013d %08d %016d'
  .. ' %016d %016d %016d %016d %016d%57s' -- bytes 199–255: spaces

-- Fifteen captures, in the table's order; the match ends at byte 199 (the
-- space after the last field), so the padding is compared on its own.
local HEADER_PATTERN = '^PACER1 (%d%d%d) (%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d) ([01]) '
  .. '([0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
  .. '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) ([+-]%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) (%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
  .. '(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d) '
local PADDING = '                                                         ' -- bytes 199–255

local POLICY_CODE = { refund = 0, strict = 1 }

-- A bucket is one flat table: its configuration (the fields parse_config
-- gives), its secret, its state (high_water_ms, tokens_units, seq: so the
-- bucket itself is the state the rule reads), its serial and its counters.
-- One table, not one per part: this script runs on every call, and every
-- table is garbage to collect.

-- The header's 256 bytes for `bucket`.
local function encode_header(bucket)
  return string.format(
    HEADER_FORMAT,
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
    ''
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

-- The bucket the header `raw` holds, or the "not a pacer bucket" error:
-- too short, another magic, a field out of form, a number at or above
-- 2^52, a zero burst, tokens above capacity. Whether Params::plan accepts
-- the stored configuration is checked by the caller (stored_config_ok):
-- an admission whose own, already checked, configuration is the same
-- needs no second check.
local function decode_header(key, raw)
  local rate, burst, idle, retries, policy, secret, high_water, tokens, seq, serial,
    admitted, refused, booked, released, release_refused = string.match(raw, HEADER_PATTERN)
  if rate == nil or string.sub(raw, 200, HEADER_LEN) ~= PADDING then
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
  return {
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
-- work it skips would have: the planned configuration by its five argument
-- texts (only configurations that passed every check), and per key the
-- header this library last wrote there with the bucket it encodes (a key
-- whose bytes are anything else, written by the module, another client or
-- edited by hand, is decoded in full). Each is emptied when it holds 1000
-- entries, so memory stays bounded whatever the keys and arguments.

local CACHE_LIMIT = 1000
local plans, plans_held = {}, 0
local written, buckets, written_held = {}, {}, 0

-- The five configuration arguments as one text (none holds a space once
-- checked, so four spaces part them unambiguously).
local function plan_key(argv)
  return argv[2] .. ' ' .. argv[3] .. ' ' .. argv[4] .. ' ' .. argv[5] .. ' ' .. argv[6]
end

local function remember_plan(argv, config, params)
  if plans_held >= CACHE_LIMIT then
    plans, plans_held = {}, 0
  end
  plans_held = plans_held + 1
  plans[plan_key(argv)] = { config = config, params = params }
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
  }
end

-- Writes `bucket`'s header to `key` and remembers both (the caller does
-- not change `bucket` after this).
local function store_bucket(key, bucket)
  local header = encode_header(bucket)
  redis.call('SETRANGE', key, 0, header)
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

-- The clock this call decides at: `AT <ms>` on a test copy, else the
-- server's.
local function read_clock(at_text)
  if at_text == nil then
    return (server_time())
  end
  if not TEST_CLOCK then
    fail('AT needs a server started for tests')
  end
  return whole_argument(at_text, 'AT')
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
-- the header, SETBIT for the bitmap), then replies.

-- Arity: the op (argv[1]) and `fixed` arguments, then nothing or
-- `AT <ms>`. Returns AT's text.
local function clock_argument(op, argv, fixed)
  local extra = #argv - 1 - fixed
  if extra ~= 0 and extra ~= 2 then
    fail('wrong number of arguments for ' .. op)
  end
  if extra == 2 then
    if string.upper(argv[fixed + 2]) ~= 'AT' then
      fail(fmt("unknown argument '%s'", shown(argv[fixed + 2])))
    end
    return argv[fixed + 3]
  end
  return nil
end

local function flag(value)
  if value then
    return 1
  end
  return 0
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
  local at_text = clock_argument(op, argv, fixed)
  local held = plans[plan_key(argv)]
  local config = held and held.config or parse_config(argv, 2)
  local retries_left
  if op == 'book' then
    retries_left = whole_argument(argv[7], 'retries_left')
  end
  local now_ms = read_clock(at_text)
  local params = held and held.params
  if params == nil then
    local problem = config_error(config)
    if problem then
      fail(problem)
    end
    params = plan(config)
    remember_plan(argv, config, params)
  end

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
  if op == 'book' then
    next_state, answer = reserve_or_book(params, bucket, now_ms, retries_left)
  else
    next_state, answer = reserve(params, bucket, now_ms)
  end

  -- Validation is over: write.
  local ticket = false
  local slot_ms = answer.slot_ms or 0
  if answer.seq then
    local serial = bucket.serial
    bucket.serial = serial + 1
    ticket = ticket_text(key, bucket.secret, serial, answer.seq, answer.debit_units, slot_ms)
    if serial >= SPENT_WINDOW then
      redis.call('SETBIT', key, spent_bit(serial), 0) -- a new ticket is unspent
    end
  end
  set_state(bucket, next_state)
  bucket[answer.kind] = bucket[answer.kind] + 1 -- its counter: admitted, refused or booked
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
-- "Tickets", in order). Gives the ticket, the clock, the bucket, its params.
local function ticket_command(op, key, argv)
  local at_text = clock_argument(op, argv, 1)
  local ticket = parse_ticket(argv[2])
  local now_ms = read_clock(at_text)
  local bucket = load_existing_bucket(key)
  local params = plan(bucket)
  check_ticket(key, bucket, ticket)
  return ticket, now_ms, bucket, params
end

-- PACER.RELEASE.
local function release_command(key, argv)
  local ticket, now_ms, bucket, params = ticket_command('release', key, argv)

  local next_state, refunded = release(params, bucket, ticket, now_ms)
  -- Spent either way, even when strict refused the refund.
  redis.call('SETBIT', key, spent_bit(ticket.serial), 1)
  set_state(bucket, next_state)
  if refunded then
    bucket.released = bucket.released + 1
  else
    bucket.release_refused = bucket.release_refused + 1
  end
  store_bucket(key, bucket)
  return flag(refunded)
end

-- PACER.REDEEM: the ticket is a booking. Pure.
local function redeem_command(key, argv)
  local ticket, now_ms, _, params = ticket_command('redeem', key, argv)
  if ticket.slot_ms == 0 then
    fail('not a booking')
  end
  local answer = redeem(params, ticket.slot_ms, now_ms)
  if answer.kind == 'admitted' then
    return { 'admitted', answer.wait_ms, argv[2], 'booked', 0 }
  end
  return { 'notyet', answer.retry_after_s, argv[2] }
end

-- PACER.INFO: argv is the op, then [AT ms]. Read-only.
local function info_command(key, argv)
  local at_text = clock_argument('info', argv, 0)
  local now_ms = read_clock(at_text)
  local bucket = load_existing_bucket(key)
  local params = plan(bucket)
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
  }
end

-- ---------------------------------------------------------------------------
-- Entry points: the script, `EVALSHA <sha> 1 <key> <op> <arguments…>`, or
-- the same text loaded as a Redis function library (docs/redis.md: with a
-- first line `#!lua name=pacer`), `FCALL pacer 1 <key> <op> <arguments…>`.

local function main(keys, argv)
  if #keys ~= 1 then
    fail(fmt('the script takes exactly 1 key, got %d', #keys))
  end
  local key = keys[1]
  local op = string.lower(argv[1] or '')
  if op == 'create' or op == 'reserve' or op == 'book' then
    return admission_command(key, op, argv)
  elseif op == 'release' then
    return release_command(key, argv)
  elseif op == 'redeem' then
    return redeem_command(key, argv)
  elseif op == 'info' then
    return info_command(key, argv)
  end
  fail(fmt("unknown op '%s'", shown(argv[1] or '')))
end

-- main's reply; a failure as the error reply "ERR pacer: <message>".
local function run(keys, argv)
  local ok, result = pcall(main, keys, argv)
  if ok then
    return result
  end
  if getmetatable(result) ~= PacerError then
    error(result, 0) -- a fault in this script: Redis reports it
  end
  if result.redis_error then
    return result.redis_error -- Redis's own error (WRONGTYPE), as it came
  end
  return redis.error_reply('ERR pacer: ' .. result.message)
end

if redis.register_function then
  redis.register_function('pacer', run) -- FUNCTION LOAD: runs once
else
  return run(KEYS, ARGV) -- EVAL / EVALSHA: runs every call
end
