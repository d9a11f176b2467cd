"""The Redis store's Lua scripts (``redis.py``), one per read-modify-write, each atomic
across replicas. ``GUARD`` is prepended to every one: it refuses to run (error
``LATE``) once Redis's clock passes the deadline given as the last ARGV.
"""

from __future__ import annotations

__all__ = ["ACK", "ALLOCATE", "CHANGED", "CHANGES", "CREATE", "END", "GUARD", "LATE", "LEASE",
           "NUMBER", "OCCURRENCE", "RECORD", "SET_REWARD"]

LATE = "SEEDPROXY_LATE"

# Prepended to every script; its deadline is the last ARGV. Effects replication
# (Redis 5+) lets a script read TIME and then write.
GUARD = f"""
local now = redis.call('TIME')
if tonumber(now[1]) + tonumber(now[2]) / 1000000 > tonumber(ARGV[#ARGV]) then
  return redis.error_reply('{LATE} the caller stopped waiting before this ran')
end
"""

# The occurrence hash ``c``: ``k:{key}`` -> the next number, ``i:{id}`` -> the one taken.
NUMBER = """
local function number(hash, key, id)
  local known = redis.call('HGET', hash, 'i:' .. id)
  if known then return tonumber(known) end
  local taken = redis.call('HINCRBY', hash, 'k:' .. key, 1) - 1
  redis.call('HSET', hash, 'i:' .. id, taken)
  return taken
end
"""

# A session's records after a sequence number: its sequence number and their blobs.
CHANGED = """
local function changed(s, i, q, after)
  local seq = tonumber(redis.call('HGET', s, 'rseq') or '0')
  if after < 0 then return seq, redis.call('HVALS', i) end
  if seq <= after then return seq, {} end
  local ids = redis.call('ZRANGEBYSCORE', q, '(' .. after, '+inf')
  if #ids == 0 then return seq, {} end
  return seq, redis.call('HMGET', i, unpack(ids))
end
"""

# KEYS: s, c ; ARGV: key, interaction id
OCCURRENCE = NUMBER + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return number(KEYS[2], ARGV[1], ARGV[2])
"""

# KEYS: s, r, rz, p, active, c, i, q ; ARGV: digest, retry, pinned ("" = none), memory,
# now, id, content key ("" = none), created_seq ("" = any), after ("" = none). Returns
# {-1} (no such session), {2, seq, blobs} (stale: the records after ``after``), else
# {status, "index|interaction_id", occurrence or -1}.
ALLOCATE = NUMBER + CHANGED + """
if redis.call('EXISTS', KEYS[1]) == 0 or (ARGV[8] ~= '' and
    redis.call('HGET', KEYS[1], 'created_seq') ~= ARGV[8]) then return {-1} end
if ARGV[9] ~= '' then
  local seq, blobs = changed(KEYS[1], KEYS[7], KEYS[8], tonumber(ARGV[9]))
  if #blobs > 0 then return {2, seq, blobs} end
end
local function seat(slot)
  if ARGV[7] == '' then return -1 end
  return number(KEYS[6], ARGV[7], string.sub(slot, string.find(slot, '|', 1, true) + 1))
end
local clock
if ARGV[2] == '1' then
  local kept = redis.call('HGET', KEYS[2], ARGV[1])
  if kept then
    clock = redis.call('HINCRBY', KEYS[1], 'rclock', 1)
    redis.call('ZADD', KEYS[3], clock, ARGV[1])
    return {1, kept, seat(kept)}
  end
end
local slot
if ARGV[3] ~= '' then
  local extra = redis.call('HINCRBY', KEYS[4], ARGV[3], 1) - 1
  slot = ARGV[3] .. '|i' .. ARGV[3] .. '.p' .. extra
else
  local index = redis.call('HINCRBY', KEYS[1], 'next_index', 1) - 1
  slot = index .. '|i' .. index
end
redis.call('HSET', KEYS[1], 'last_active_at', ARGV[5])
redis.call('ZADD', KEYS[5], ARGV[5], ARGV[6])
redis.call('HSET', KEYS[2], ARGV[1], slot)
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  clock = redis.call('HINCRBY', KEYS[1], 'rclock', 1)
  redis.call('ZADD', KEYS[3], clock, ARGV[1])
end
if redis.call('ZCARD', KEYS[3]) > tonumber(ARGV[4]) then
  local oldest = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  redis.call('ZREM', KEYS[3], oldest)
  redis.call('HDEL', KEYS[2], oldest)
end
return {0, slot, seat(slot)}
"""

# KEYS: s, all, open, key, created-counter, identity, unexp, active, ver, epoch, [group] ;
# ARGV: id, rec-json, now, has-group, channel, max open ("" = none), reserve, a new epoch.
# Returns {-1} id taken, {-2} over the cap, else {created_seq, the store's epoch}; the
# epoch is drawn by the first create on an empty database (``SET NX``).
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
if ARGV[6] ~= '' and redis.call('SCARD', KEYS[3]) + tonumber(ARGV[7]) > tonumber(ARGV[6]) then
  return {-2}
end
redis.call('SET', KEYS[10], ARGV[8], 'NX')
local epoch = redis.call('GET', KEYS[10])
local seq = redis.call('INCR', KEYS[5]) - 1
redis.call('HSET', KEYS[1], 'rec', ARGV[2], 'next_index', 0, 'last_active_at', ARGV[3],
  'ended', 0, 'ended_seq', '', 'reward', '', 'exported', 0, 'created_seq', seq, 'n', 0,
  'epoch', epoch)
redis.call('ZADD', KEYS[2], seq, ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[6], seq, ARGV[1])
redis.call('ZADD', KEYS[7], seq, ARGV[1])
redis.call('ZADD', KEYS[8], ARGV[3], ARGV[1])
redis.call('INCR', KEYS[9])
if ARGV[4] == '1' then redis.call('ZADD', KEYS[11], seq, ARGV[1]) end
redis.call('PUBLISH', ARGV[5], 'created')
return {seq, epoch}
"""

# KEYS: s, open, ended-counter, ready, ver ; ARGV: id, channel, abandoned before ("":
# end it as "ended"; else as "abandoned", only if last active at or before that time)
END = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'ended') == '0' and (ARGV[3] == '' or
    tonumber(redis.call('HGET', KEYS[1], 'last_active_at')) <= tonumber(ARGV[3])) then
  local seq = redis.call('INCR', KEYS[3]) - 1
  local status = 'ended'
  if ARGV[3] ~= '' then status = 'abandoned' end
  redis.call('HSET', KEYS[1], 'ended', 1, 'ended_seq', seq, 'es', status)
  redis.call('SREM', KEYS[2], ARGV[1])
  if redis.call('HGET', KEYS[1], 'exported') ~= '1' then
    redis.call('ZADD', KEYS[4], seq, ARGV[1])
  end
  redis.call('INCR', KEYS[5])
  redis.call('PUBLISH', ARGV[2], 'ended')
end
return redis.call('HGET', KEYS[1], 'exported')
"""

# KEYS: s, i, o, w, q, active, ver ; ARGV: interaction_id, data, now, order member,
# summary json, id, after ("" = none). Returns 0 (no session), else {seq, current}:
# current is 1 when no record after ``after`` was stored before this one.
# A replaced interaction (a retry) starts with no reward, as in every store. The
# summary (``record.apply_summary``): ``n`` the count (absent: a session stored before
# it was kept), ``lo`` the last order member, ``ls`` the last one's listed fields.
RECORD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local current = 0
if ARGV[7] ~= '' then
  local after = tonumber(ARGV[7])
  if after < 0 then
    if redis.call('HLEN', KEYS[2]) == 0 then current = 1 end
  elseif #redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. after, '+inf', 'LIMIT', 0, 1) == 0 then
    current = 1
  end
end
local new = redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'n') == 1 then
  if new == 1 then redis.call('HINCRBY', KEYS[1], 'n', 1) end
  local last = redis.call('HGET', KEYS[1], 'lo')
  if not last or ARGV[4] >= last then redis.call('HSET', KEYS[1], 'lo', ARGV[4], 'ls', ARGV[5]) end
end
redis.call('ZADD', KEYS[3], 0, ARGV[4])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[1], 'last_active_at', ARGV[3])
local seq = redis.call('HINCRBY', KEYS[1], 'rseq', 1)
redis.call('ZADD', KEYS[5], seq, ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[3], ARGV[6])
redis.call('INCR', KEYS[7])
return {seq, current}
"""

# KEYS: s, i, q ; ARGV: after. Returns {-1} for no session, else {seq, blobs}.
CHANGES = CHANGED + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
return {changed(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]))}
"""

# KEYS: s, i, o, w, ver ; ARGV: reward, interaction_id ("" = the last one)
# Returns {-1} no session, {-2} no such interaction, {0} none to reward, {1, id}.
SET_REWARD = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local target = ARGV[2]
if target == '' then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1)[1]
  target = last and string.sub(last, 22) or ''
elseif redis.call('HEXISTS', KEYS[2], target) == 0 then
  return {-2}
end
redis.call('HSET', KEYS[1], 'reward', ARGV[1])
redis.call('INCR', KEYS[5])
if target == '' then return {0} end
redis.call('HSET', KEYS[4], target, ARGV[1])
return {1, target}
"""

# KEYS: batch, s_1..s_n, l_1..l_n ; ARGV: batch_id, now, until, named, keep_ms,
# batch json, seq_1..seq_n. Returns the (1-based) positions refused; {} = leased.
LEASE = """
local n = (#KEYS - 1) / 2
local refused = {}
for i = 1, n do
  local s, l = KEYS[1 + i], KEYS[1 + n + i]
  local bad = redis.call('HGET', s, 'created_seq') ~= ARGV[6 + i]
  if not bad then
    local held = redis.call('GET', l)
    if held and tonumber(string.match(held, '^([^|]*)|')) > tonumber(ARGV[2]) then bad = true end
  end
  if not bad and ARGV[4] == '0' and redis.call('HGET', s, 'exported') == '1' then bad = true end
  if bad then refused[#refused + 1] = i end
end
if #refused > 0 then return refused end
local value = ARGV[3] .. '|' .. ARGV[1]
for i = 1, n do redis.call('SET', KEYS[1 + n + i], value) end
redis.call('SET', KEYS[1], ARGV[6], 'PX', ARGV[5])
return {}
"""

# KEYS: batch, s_1..s_n, l_1..l_n, unexp, ready, ver ; ARGV: batch_id, keep_ms,
# acked batch json, seq_1..seq_n, id_1..id_n, channel. Returns -1 for a forgotten batch,
# else {positions still this batch's sessions, positions of those that have ended}.
ACK = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local n = (#KEYS - 4) / 2
local unexp, ready, ver = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local mine, ended = {}, {}
for i = 1, n do
  local s, l = KEYS[1 + i], KEYS[1 + n + i]
  if redis.call('HGET', s, 'created_seq') == ARGV[3 + i] then
    local held = redis.call('GET', l)
    if held and string.match(held, '^[^|]*|(.*)$') == ARGV[1] then redis.call('DEL', l) end
    redis.call('HSET', s, 'exported', 1)
    redis.call('ZREM', unexp, ARGV[3 + n + i])
    redis.call('ZREM', ready, ARGV[3 + n + i])
    mine[#mine + 1] = i
    if redis.call('HGET', s, 'ended') == '1' then ended[#ended + 1] = i end
  end
end
if #mine > 0 then
  redis.call('INCR', ver)
  redis.call('PUBLISH', ARGV[#ARGV - 1], 'exported')
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
return {mine, ended}
"""
