"""Worker processes. The parent launches `python -m harness.worker ROLE CMD_FD RESULT_FD`; nothing in this
package is imported by the parent."""
