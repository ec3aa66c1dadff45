"""Content policy on the wire: the texts of a request the model sees, and an answer's texts as they stream."""
