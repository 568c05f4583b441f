"""C that p4ina compiles on the machine it runs on, with the system compiler: the embedded switch's
engine (softswitch) and the in-network worker's stream loop (hosts.native_stream).

It sits below hosts/ and softswitch/ so that both can load what they compile through one safe cache
(native.cbuild); it imports nothing of p4ina's."""
