"""The supervisor daemon's rooms: observe, decide, gate, act, publish; the loop wires them."""
