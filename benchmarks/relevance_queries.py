"""Labelled queries on the shared catalog (../shared/data/books.jsonl), written for Attend.

Each query names what a reader would accept as an answer, as a rule over the catalog: books
whose title matches `title` (a regular expression, case-insensitive) or one of whose authors
contains `author`. Three kinds: an author's name, a title as a reader types it,
and a description in the reader's own words (no title or author word in it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Labelled:
    kind: str  # "author", "title" or "description"
    query: str
    title: str | None = None  # regex over titles
    author: str | None = None  # substring of an author's name


QUERIES = [
    # a name, as typed
    Labelled("author", "Stephen King", author="Stephen King"),
    Labelled("author", "Agatha Christie", author="Agatha Christie"),
    Labelled("author", "Tolkien", author="Tolkien"),
    Labelled("author", "Terry Pratchett", author="Terry Pratchett"),
    Labelled("author", "Neil Gaiman", author="Neil Gaiman"),
    Labelled("author", "jane austen", author="Jane Austen"),
    Labelled("author", "Vonnegut", author="Kurt Vonnegut"),
    Labelled("author", "Philip K. Dick", author="Philip K. Dick"),
    Labelled("author", "Roald Dahl", author="Roald Dahl"),
    Labelled("author", "Stephen Hawking", author="Stephen Hawking"),
    Labelled("author", "Orson Scott Card", author="Orson Scott Card"),
    Labelled("author", "Clive Cussler", author="Clive Cussler"),
    Labelled("author", "Gabriel Garcia Marquez", author="García Márquez"),
    Labelled("author", "Plato", author="Plato"),
    Labelled("author", "Janet Evanovich", author="Janet Evanovich"),
    Labelled("author", "virginia woolf", author="Virginia Woolf"),
    Labelled("author", "Dean Koontz", author="Dean Koontz"),
    Labelled("author", "Wodehouse", author="P.G. Wodehouse"),
    Labelled("author", "Bill Bryson", author="Bill Bryson"),
    Labelled("author", "Cormac McCarthy", author="Cormac McCarthy"),
    # a title, as typed (no subtitle, no series marker)
    Labelled("title", "Pride and Prejudice", title=r"^pride and prejudice"),
    Labelled("title", "Hamlet", title=r"^hamlet\b"),
    Labelled("title", "The Fellowship of the Ring", title=r"fellowship of the ring"),
    Labelled("title", "Harry Potter and the Goblet of Fire", title=r"goblet of fire"),
    Labelled("title", "Middlemarch", title=r"^middlemarch"),
    Labelled("title", "I, Claudius", title=r"^i\s+claudius"),
    Labelled("title", "Throne of Jade", title=r"^throne of jade"),
    Labelled("title", "Lord of Chaos", title=r"^lord of chaos"),
    Labelled("title", "Cry, the Beloved Country", title=r"^cry\s+the beloved country"),
    Labelled("title", "Absolute Power", title=r"^absolute power"),
    Labelled("title", "The Lexus and the Olive Tree", title=r"lexus and the olive tree"),
    Labelled("title", "Imajica", title=r"^imajica"),
    Labelled("title", "Sahara", title=r"^sahara\b"),
    Labelled("title", "A Brief History of Time", title=r"brief history of time"),
    Labelled("title", "Dracula", title=r"^dracula\b"),
    Labelled("title", "Cold Mountain", title=r"^cold mountain"),
    Labelled("title", "The Handmaid's Tale", title=r"^the handmaid.s tale"),
    Labelled("title", "Charlotte's Web", title=r"^charlotte.s web|annotated charlotte.s web"),
    Labelled("title", "Catch-22", title=r"^catch-22"),
    Labelled("title", "Anna Karenina", title=r"^anna karenina"),
    Labelled("title", "The Master and Margarita", title=r"^the master and margarita"),
    # a description in the reader's words
    Labelled(
        "description",
        "an orphan boy learns he is a wizard and goes to a boarding school of magic",
        title=r"harry potter",
    ),
    Labelled(
        "description",
        "small folk from the shire travel to destroy an evil lord's ring of power",
        title=r"lord of the rings|fellowship of the ring|two towers|return of the king|hobbit",
    ),
    Labelled(
        "description",
        "a clumsy bounty hunter from Trenton who keeps blowing up her cars",
        title=r"stephanie plum",
    ),
    Labelled(
        "description",
        "an adventurer from a marine agency raises sunken ships and foils villains",
        title=r"dirk pitt|numa files",
    ),
    Labelled(
        "description",
        "a naval captain and his dragon fight in the wars against Napoleon",
        title=r"temeraire",
    ),
    Labelled(
        "description",
        "a gifted child is trained at a military school in orbit to fight an alien invasion",
        title=r"\bender\b|ender.s",
    ),
    Labelled(
        "description",
        "comic fantasy on a flat world carried on the backs of elephants and a giant turtle",
        title=r"discworld",
    ),
    Labelled(
        "description",
        "a prince of Denmark feigns madness to avenge his murdered father",
        title=r"hamlet",
    ),
    Labelled(
        "description",
        "black holes, the big bang and the nature of time explained for general readers",
        title=r"brief history of time|briefer history of time|universe in a nutshell|black holes",
    ),
    Labelled(
        "description",
        "a Belgian detective with a moustache uses his little grey cells to solve a murder",
        title=r"hercule poirot|poirot",
    ),
    Labelled(
        "description",
        "children step through a wardrobe into a land ruled by a lion",
        title=r"narnia|lion  the witch|wardrobe",
    ),
    Labelled(
        "description",
        "a ruthless man hunts an enormous white whale across the oceans",
        title=r"moby.dick",
    ),
]

# Queries with nothing to find: what "no strong match" should flag.
NONSENSE = [
    "qwertyuiop asdfghjkl",
    "zzxq vlorp",
    "the of and",
    "purple dishwasher trombone",
    "xkcd 9000 lorem ipsum",
    "asdf",
]

# Real words on topics the shared catalog holds no book on (none of their distinctive words,
# "blockchain", "kubernetes", "tiktok", "crispr", "keto"…, is in any of its descriptions, checked
# by hand): words of them occur in books ("contracts", "management", "beginners"), so the
# lexical head finds something, and "no strong match" should still flag them.
OFF_TOPIC = [
    "blockchain smart contracts in solidity",
    "kubernetes cluster autoscaling",
    "rust borrow checker lifetimes",
    "tiktok marketing for small businesses",
    "electric vehicle battery recycling",
    "mrna vaccine development",
    "react hooks and redux state management",
    "esports team management",
    "deep learning with pytorch",
    "crispr gene editing ethics",
    "cryptocurrency mining rigs",
    "keto meal prep for athletes",
    "instagram influencer contracts",
    "smartphone app monetization",
    "3d printing tabletop miniatures",
    "installing solar panels on a flat roof",
    "covid-19 lockdown diaries",
    "quantum error correction codes",
    "bitcoin investing for beginners",
    "social media addiction in teenagers",
]
