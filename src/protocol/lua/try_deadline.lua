-- The start of every acquisition try's script (the lock's kinds): a try that reaches the
-- server after its deadline (its last argument: ms since the epoch, on the server's clock) is
-- refused, and changes nothing. Its caller has given up on it (it waits for an answer no
-- longer than that), and an undo of it may have run already: a try held up in the network
-- past both must not take what nobody will hold. Answers {5, the server's time} then.
do
  local now = server_now_ms()
  if now > tonumber(ARGV[#ARGV]) then
    return {5, now}
  end
end
