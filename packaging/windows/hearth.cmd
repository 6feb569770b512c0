@echo off
rem The `hearth` command on PATH (installed to {app}\bin by hearth.iss): the console executable one folder up.
"%~dp0..\hearth-cli.exe" %*
