-- read_run: a run's document and operational fields, read at one instant.
--
-- KEYS  1 run
-- returns {doc, wake, claimed, attempts, abandons, poisoned, preason, ct, queue, priority}
-- (doc nil: no run; queue and priority nil: the defaults, lanes.lua)
-- #include doc_pieces

local fields = redis.call('HMGET', KEYS[1], 'wake', 'claimed', 'attempts', 'abandons',
  'poisoned', 'preason', 'ct', 'q', 'p')
return {read_doc(KEYS[1]), fields[1], fields[2], fields[3], fields[4], fields[5], fields[6],
  fields[7], fields[8], fields[9]}
