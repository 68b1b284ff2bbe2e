"""Schedules: the catalog (create, change, pause, run now, through the API and the CLI), one
tick (fire what is due into exports and deliveries) and the loop that ticks and sends until
stopped."""
