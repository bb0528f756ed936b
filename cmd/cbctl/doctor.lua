-- doctor.lua: what cbctl doctor asks of scripts beyond running them. The
-- coordinator's scripts read the server's clock (TIME) and the feeds'
-- heartbeats read INFO replication; an ACL, or a managed service, may
-- refuse either inside a script while letting the script run. It writes
-- nothing.
--
-- KEYS: none
-- ARGV: none
-- Reply: the commands refused inside the script, {} when none
local refused = {}
for _, c in ipairs({{'TIME'}, {'INFO', 'replication'}}) do
  local reply = redis.pcall(unpack(c))
  if type(reply) == 'table' and reply.err then
    refused[#refused + 1] = c[1]
  end
end
return refused
