-- sandbox: a coroutine that times out does not set its resumer free
while true do
  coroutine.resume(coroutine.create(function() while true do end end))
end
