"""tasks stage of flightplan."""
