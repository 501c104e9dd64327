"""The neural side of Attend: the sentence encoder and the attention core. Torch only."""
