"""`ddpcheck lint`: static analysis on libcst. Never imports or executes the code it reads."""
