-- lease.lua: bring a global bucket up to now and take up to `want` whole tokens from it.
-- Runs after bucket.lua (KEYS[1], ARGV[1..5]: the bucket, L, T, B, now, algorithm).
--
-- ARGV[6]  want: tokens asked for (>= 0)
-- ARGV[7]  least (optional, default `want`): of the grant, only `least` may leave the bucket
--          below half its burst (a cold lease takes its extra only from a bucket far from its
--          limit)
-- ARGV[8]  turn gap in µs (optional, default 0: none) and
-- ARGV[9]  starved_below (optional, default 0): a grant of fewer than `starved_below` tokens,
--          or short of ARGV[15] while the queue has turns to come, also gets a turn in the key's
--          queue of starved callers (field `q`, the last turn given): `q` plus the gap while
--          `q` is ahead of now; once the queue has run out, when the bucket holds what the caller
--          lacks (1 µs to the gap from now; sluice_engine::next_turn). Starved sidecars then ask
--          again one per gap, however many they are.
-- Returns  {granted, remaining_millitokens, window, ends_in, turn_in, reserved, reserved_all,
--          reserved_ends_in}:
--          granted = min(want, floor
--          of what is available, max(least, floor of what is available above half the burst));
--          remaining is what is available after the grant, in thousandths of a token, rounded
--          down; window and ends_in (µs) name the window the tokens belong to and when it ends
--          ({0, -1} for a token bucket); turn_in is µs until the caller's turn (-1: none);
--          reserved is ARGV[11]'s grant (-1: none asked for); reserved_all is every live
--          reservation's grant after the call (`R`, thousandths of a token per period: the bucket
--          refills at `L − R`) and reserved_ends_in the µs from now until every reservation has
--          lapsed at the latest (`z`; 0: none is live). The arithmetic is
--          BucketState::take_keeping_half's.
-- ARGV[10] concurrency (algorithm 3): the caller's holder id. The grant is added to what it
--          holds, and every call (a grant of 0 too) moves its lapse on (bucket.lua's `holders`);
--          ends_in is the hold timeout: the caller's slots lapse then unless it calls again; and
--          `window` (none for this algorithm) is what the caller holds after the call, so it can
--          give back slots of a grant whose answer it lost, or learn that its slots lapsed.
--          Leases of rate: the caller as a holder of a reservation too.
-- ARGV[11] 1: also reserve (bucket.lua's `reserve`) ARGV[12] thousandths of a token per period
--          for ARGV[13] µs, and answer what was granted as a sixth value (-1: none asked for),
--          after giving back ARGV[14] thousandths of a token (a token bucket; capped at the
--          burst) first
-- ARGV[15] queue_below (optional, default `least`): see ARGV[9] (LeaseAsk::queue_below)
-- ARGV[16] next_needs (optional, default: no bound): the first turn of a queue that has run
--          out waits for no more than this many tokens (LeaseAsk::next_needs, ::lacking)
if algorithm == 3 then reclaim() end
local want = tonumber(ARGV[6])
local least = want
if ARGV[7] ~= nil and ARGV[7] ~= '' then least = tonumber(ARGV[7]) end
local gap = 0
if ARGV[8] ~= nil and ARGV[8] ~= '' then gap = tonumber(ARGV[8]) end
local queue_below = least
if ARGV[15] ~= nil and ARGV[15] ~= '' then queue_below = tonumber(ARGV[15]) end
local below = 0
if ARGV[9] ~= nil and ARGV[9] ~= '' then below = tonumber(ARGV[9]) end
local next_needs = nil
if ARGV[16] ~= nil and ARGV[16] ~= '' then next_needs = tonumber(ARGV[16]) end
-- Leases of rate: what the caller's full stock could not hold, and what an empty one filled of
-- a token, is given back first (ARGV[14], thousandths of a token).
if ARGV[11] == '1' and algorithm == 0 then
  local back = tonumber(ARGV[14])
  if back > 0 then tokens = math.min(tokens + back / 1000, burst) end
end
local avail = available()
local granted = math.floor(avail)
if granted > want then granted = want end
if granted < 0 then granted = 0 end
local above_half = math.floor(avail - burst / 2)
if above_half < 0 then above_half = 0 end
if least < above_half then least = above_half end
if granted > least then granted = least end
tokens = tokens - granted
local reserved_now = -1
if ARGV[11] == '1' then
  reserved_now = reserve(ARGV[10], tonumber(ARGV[12]), tonumber(ARGV[13]))
end
save()
if algorithm == 3 then hold(ARGV[10], granted) end
-- After save(): the queue lives in the bucket's hash and goes with it when it expires (a full
-- bucket starves nobody).
local turn_in = -1
if gap > 0 and (granted < below or granted < queue_below) then
  local q = tonumber(redis.call('HGET', KEYS[1], 'q')) or 0
  if granted < below or q > now then
    if q > now then
      q = q + gap
    else
      -- The queue has run out: this caller is first, its turn when the bucket holds what it
      -- lacks, at least 1 µs and at most the gap from now (sluice_engine::ready_in).
      local ready = gap
      local lacking = below - granted
      if next_needs ~= nil and next_needs < lacking then lacking = next_needs end
      if algorithm == 0 then
        local after = available()
        if after >= lacking then
          ready = 0
        elseif rpu > 0 and lacking <= burst then
          ready = math.ceil((lacking - after) * unit / rpu)
        end
      end
      if ready < 1 then ready = 1 end
      if ready > gap then ready = gap end
      q = now + ready
    end
    redis.call('HSET', KEYS[1], 'q', string.format('%d', q))
    turn_in = q - now
  end
end
local window, ends_in = window_answer()
if algorithm == 3 then window = held_by(ARGV[10]) end
local reserved_ends_in = 0
if reserve_asked > 0 and reserve_end ~= nil and reserve_end > now then
  reserved_ends_in = reserve_end - now
end
return {granted, math.floor(available() * 1000), window, ends_in, turn_in, reserved_now, reserved,
  reserved_ends_in}
