"""The foundation every room stands on: errors, logs, fault injection, containers, cron, notices."""
