"""Teachers' labs: a teacher books a slot for a class, the warm pools follow the bookings."""
