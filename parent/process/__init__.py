"""A child process: spawned, contained, watched and always taken down again."""
