"""What the tests share but pytest does not collect: the servers a test starts (PostgreSQL
templates, MariaDB, Spark Connect, moto's S3), the stores and containers built over them,
receivers for deliveries, factories of rows. A module here may define fixtures; a test module
or a conftest.py imports them by name."""
