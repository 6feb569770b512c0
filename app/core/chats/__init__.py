"""Conversations: the chat store, the prompt built from a chat, thinking, answers saved while they stream."""
