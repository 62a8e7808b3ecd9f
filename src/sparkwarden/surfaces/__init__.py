"""What an operator sees and asks: the control socket, status text, metrics, webhooks."""
