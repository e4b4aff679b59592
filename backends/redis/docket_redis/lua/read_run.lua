-- read_run: a run's document and operational fields, read at one instant.
--
-- KEYS  1 run
-- returns {doc, wake, claimed, attempts, abandons, poisoned, preason, ct} (doc nil: no run)
-- #include doc_pieces

local fields = redis.call('HMGET', KEYS[1], 'wake', 'claimed', 'attempts', 'abandons',
  'poisoned', 'preason', 'ct')
return {read_doc(KEYS[1]), fields[1], fields[2], fields[3], fields[4], fields[5], fields[6],
  fields[7]}
