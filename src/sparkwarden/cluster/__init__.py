"""Several Sparks as one engine: the head's sparkwarden restarts and watches them as a unit."""
