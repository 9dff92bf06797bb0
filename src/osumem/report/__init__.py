"""Tables and figures built from result rows."""
