"""M_theta, the foundation model: the model registry, the `openai` client, the response cache, the local llama.cpp server and its weights."""
