"""Reports over stored grades: `stats` builds them (pure), `text` and `html` render them."""
