"""Schedules: the catalog (create, change, pause, run now, through the API and the CLI), with
who sees and manages a schedule (visibility), its checks and members' subscriptions; and one
tick (fire what is due into exports and deliveries). The loop that ticks and sends until
stopped is the scheduler process, `qexport.scheduler`."""
