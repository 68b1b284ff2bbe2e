"""The scheduler process: the loop that fires due schedules (`qexport scheduler`)."""
