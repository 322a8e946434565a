"""The admin's profiles: what a user may ask for and what GPU a profile requests (``options``),
and which placement traits a profile may set (``policy``)."""
