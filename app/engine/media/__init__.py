"""Images and sounds through llama.cpp's libmtmd: the projector beside the text model, and a prompt with media."""
