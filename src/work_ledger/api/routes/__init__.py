"""One router per group of endpoints; app.py includes them."""
