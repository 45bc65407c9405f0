"""plan stage of flightplan."""
