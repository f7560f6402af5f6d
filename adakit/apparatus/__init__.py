"""The apparatus of one run: the world W, the tools U, the protocol P, the task activators, the conditions, the agent loop, the coach-judge and the scripted baselines."""
