"""close stage of flightplan."""
