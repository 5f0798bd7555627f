# A classic-watchdog entry point written for faas-gpu's tests: the watchdog
# runs it once per request with the body on stdin.
import sys

from function import handler

if __name__ == "__main__":
    sys.stdout.write(handler.handle(sys.stdin.read()))
