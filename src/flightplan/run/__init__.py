"""run stage of flightplan."""
