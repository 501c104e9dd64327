"""Who a catalog book is written for, by rule and then by reading (the audiences of the genre
queries, benchmarks/relevance_genre.py; issue 29).

The catalog has no audience field. The markers, over "<title>. <description>" and the
publisher (a Goodreads field of ../shared/data/books.jsonl, which `Book` leaves out):

- `teen`: young adult / teen / teenage / high school / a 13–17-year-old, or a young-adult
  imprint (Laurel-Leaf, Simon Pulse, Firebird, "... for Young Readers");
- `kids`: children's book / for children / kids / young readers / Newbery / picture book /
  a 7–12-year-old / ages 3–9, or a children's imprint (HarperTrophy, Scholastic, Puffin,
  Yearling, Aladdin, Candlewick, "... Children's Books");
- `toddler`: picture book / board book / toddler / preschool / bedtime / baby, in a book of
  at most 64 pages;
- `adult`: none of these.

The markers also catch books for adults with a young narrator or a teenage victim (*Lolita*,
*Atonement*, *A Time to Kill*), or that mention kids in passing. Every marked book that is
not non-fiction (intent_queries' NONFICTION) was read, title, author and description, 337 in
all: `FOR_ADULTS` are those written for adults (they count as `adult`, whatever their
markers). The markers miss many books for the young whose blurbs do not say so (*Nancy Drew*,
*Encyclopedia Brown*, *Sabriel*), so a book is also for children when its first author is one
of `KIDS_AUTHORS`, for teens one of `TEEN_AUTHORS` (authors who write for them, every book of
theirs in the catalog read), and `FOR_KIDS` and `FOR_TEENS` list such books by authors who
also write for adults (Narnia, *Hoot*, Meg Cabot's novels for teens).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from benchmarks.relevance_labels import Book

TEEN = (
    r"young adults?\b|\bteens?\b|\bteenagers?\b|\bteenage\b|\bhigh[- ]school\b|\bYA\b"
    r"|\b(thirteen|fourteen|fifteen|sixteen|seventeen|1[3-7])[- ]years?[- ]old\b"
)
TEEN_PUBLISHER = r"laurel|simon pulse|firebird|young readers|harperteen|razorbill"
KIDS = (
    r"\bchildren'?s (book|novel|classic|stor|fantasy|literature|favou?rite|author|picture)"
    r"|\bfor children\b|\bkids\b|\byoung readers\b|\bmiddle[- ]grade\b|\bnewbery\b"
    r"|\b(seven|eight|nine|ten|eleven|twelve|[7-9]|1[0-2])[- ]years?[- ]old\b|\bages? [3-9]\b"
    r"|\bgrades? [1-6]\b|\byoungsters\b|\bjuvenile\b|\bpicture book"
)
KIDS_PUBLISHER = (
    r"harpertrophy|scholastic|puffin|yearling|aladdin|children|egmont|candlewick"
    r"|arthur a\. levine|young readers"
)
TODDLER = r"picture book|board book|\btoddlers?\b|\bpreschool|\bbedtime\b|\bbab(y|ies)\b"
TODDLER_PAGES = 64


def _ids(text: str) -> frozenset[str]:
    """Catalog ids, written space-separated."""
    return frozenset(text.split())


def _names(text: str) -> frozenset[str]:
    """Authors' names as the catalog spells them, written "|"-separated."""
    return frozenset(text.split("|"))


FOR_ADULTS = _ids(
    "9781400032716 9781419317262 9780765342515 9780764553028 9780670910618 9780385314695"
    # The Curious Incident (2), The Santaroga Barrier, Sex For Dummies, Matthew
    # Flinders' Cat, The Sixteen Pleasures
    " 9780156030489 9780974607894 9780727861153 9780393328622 9780552135399 9780618711659"
    # Kiffe Kiffe Tomorrow, Turgenev's First Love, Desert Heat, The History of Love,
    # A Prayer for Owen Meany, Extremely Loud and Incredibly Close
    " 9780312300531 9781400079278 9780425169698 9780425162446 9780452282193 9780671447205"
    # The Last Jew, Kafka on the Shore, Here on Earth, The Rapture of Canaan, The Bluest
    # Eye (2)
    " 9780099468196 9780385339087 9780743267748 9780345467324 9780385721790 9780385503952"
    # Bleachers, The Client, I'm Too Young To Be Seventy, Perfect Nightmare, Atonement (2)
    " 9780099429791 9781857151336 9780060915438 9780553379334 9780413735904 9780141010373"
    # Atonement, Lolita, Holy the Firm, Fierce Invalids, A Clockwork Orange (the play),
    # Jamie's Kitchen
    " 9781595542328 9780349113005 9780812975932 9780385481960 9780449911419 9781594481932"
    # A Time to Embrace, Embrace, Summer Crossing, Youth in Revolt, And I Don't Want to
    # Live This Life, A Long Way Down
    " 9780060837334 9780345444882 9780684839745 9780007189953 9780743418713 9780061150142"
    # The Last Days of Henry VIII, The Talisman, Good as Gold, Where Rainbows End, Salem
    # Falls, The Pact
    " 9780340838037 9780440506812 9780446362665 9780671042851 9780099771814 9780553587074"
    # The Pact, Your Eight Year Old, Summer of Night, The Girl Who Loved Tom Gordon,
    # American Pastoral, Industrial Magic
    " 9780330334617 9780552998017 9780446676434 9780300091694 9781582433226 9780751504330"
    # The Border Trilogy, The Short History of a Prince, When the Wind Blows, Dreaming in
    # Pictures, A Complicated Kindness, Different Seasons
    " 9781593075422 9780765313195 9780679761051 9780747573647 9780316159722 9780743428958"
    # Museum of Terror, Jinx High, Beauty and Sadness, The Little Friend, Yiddish with
    # Dick and Jane, Last Man Standing
    " 9780880015080 9780571200610 9781590171943 9780316168816 9780755311514 9780446696111"
    # First Love: A Gothic Tale, Garden State, The Strangers in the House, The Lovely
    # Bones, The Science of Harry Potter, The Guardian
    " 9780880014403 9780007190683 9781595820945 9780060515225 9780385489492 9780571219711"
    # The Assignation, Poirot: Ariadne Oliver, Vampire Hunter D, Fragile Things, Marie
    # Antoinette, The Moth Diaries
    " 9780156030304 9781560067849 9781400077274 9780449149911 9780374146351 9780743444040"
    # Flowers for Algernon, Understanding Flowers for Algernon, Yellow Dog, Lost Boy Lost
    # Girl, The Echo Maker, Double Dealer
    " 9781593761226 9780743231534 9780007179824 9780099461265 9781401211349 9780843954111"
    # The Soloist, Shampoo Planet, Miss Wyoming, Open House (Berg), Emma Vol. 3, The
    # Attraction
    " 9780374528539 9780345440143 9780571203154 9780140187076 9781570614590 9780316563567"
    # Get Out of My Life, I'm the One That I Want, Taxi Driver, JR, One Hundred Demons,
    # Candy
    " 9780385315289 9780446601856 9780312181109 9780449911891 9780007120871 9780770517120"
    # Running from Safety, Charade, I Capture the Castle, The Tin Can Tree, They Do It
    # With Mirrors, Who Do You Think You Are?
    " 9780374131944 9780671553043 9780446699556 9780099134015 9780140139976 9781561796779"
    # Cross-X, Life Support, The Closers, A Time to Kill, Sailor Song, Boomers Xers
    " 9781841492667 9780330490269 9780571214266 9780752857930 9781568363561 9780786868698"
    # The Word and the Void, Dirt Music, The Greek Islands, The Pusher, The Last Shogun,
    # Nigella Bites
    " 9780671553029 9780099429166 9780743264914 9780747268468 9780747267430 9780755304851"
    # Harvest, Turtle Moon, I Heard That Song Before, Jill Mansell's Kiss, Open House and
    # Falling for You
    " 9780312289515 9780099284482 9780743456869 9780671027124 9780156030939 9780312424916"
    # The Christmas Shoes, A Star Called Henry, He Sees You When You're Sleeping, All
    # Through the Night, Rose of No Man's Land, Saints at the River
    " 9780451160317 9780415970235 9780060936198 9780451219442 9781595329141"
    # I Never Promised You a Rose Garden, a study of Diana Wynne Jones, The Girl in the
    # Glass, Belle Ruin, Dragon Head
)
FOR_ADULTS |= {"9780156001458", "9780873512695", "9780373250714"}  # Winterdance, Early
# Candlelight, Monkey Business: the adult books of KIDS_AUTHORS and TEEN_AUTHORS

# First authors every one of whose catalog books (less FOR_ADULTS) was read and is for
# children, or for young adults.
KIDS_AUTHORS = _names(
    "Gordon Korman|Laura Ingalls Wilder|J.K. Rowling|Lois Lowry|Maud Hart Lovelace"
    "|Julie Aigner-Clark|Lloyd Alexander|Mary Pope Osborne|Enid Blyton|E.B. White"
    "|Louis Sachar|Kathryn Lasky|Gary Paulsen|Brian Jacques|Cynthia Rylant|Ann M. Martin"
    "|Roger Hargreaves|Peggy Parish|Donald J. Sobol|Laurence Yep|Syd Hoff|Eric Carle"
    "|Dr. Seuss|Debbie Dadey|Kevin Henkes|Cornelia Funke|Rick Riordan|Norton Juster"
    "|Astrid Lindgren|Wilson Rawls|Jane Leslie Conly|Carolyn Keene|Kate DiCamillo"
    "|Eoin Colfer|Judy Blume|Beatrix Potter|Margaret Wise Brown|Chris Van Allsburg"
    "|Tomie dePaola|Barbara Park|Sandra Boynton|Avi|Karen Cushman|Polly Horvath"
    "|Katherine Paterson|Julia Golding|Robert C. O'Brien|Shel Silverstein"
)
TEEN_AUTHORS = _names(
    "Garth Nix|Francine Pascal|Tamora Pierce|Robin McKinley|Philip Pullman|William Sleator"
    "|Dyan Sheldon|Sarah Mlynowski|Pete Hautman|Sylvia Engdahl|Ann Brashares"
    "|David Levithan|Rachel Cohn|Amelia Atwater-Rhodes|Caroline B. Cooney|Darren Shan"
    "|Laurie Halse Anderson|Carolyn Meyer|David Lubar|Melissa de la Cruz|Mari Mancusi"
    "|Ned Vizzini|Nancy Farmer|Mary Downing Hahn|Richard Peck|Stephenie Meyer"
    "|Walter Dean Myers|Jerry Spinelli|Rodman Philbrick|Diana Wynne Jones"
)
# The children's and young-adult books of authors who also write for adults (read).
FOR_KIDS = _ids(
    "9780066238500 9780694524754 9780060765453 9780020442608 9780060765484 9780590254762"
    " 9780060845247"  # C.S. Lewis: Narnia
    " 9780060012380 9780060094935 9780060541880 9780060012342"  # Pratchett: Tiffany
    # Aching, the Bromeliad, Johnny Maxwell, Maurice
    " 9780142404201 9780140320435 9780590975001 9780590032490 9780142302279 9780141311401"
    " 9780140568196 9780141318301 9780141311357 9780142407929"  # Roald Dahl's for children
    " 9780440421702 9781551112237 9780810935204"  # Hoot; Alice; Jabberwocky
)
FOR_TEENS = _ids(
    "9780689873195 9780141314570 9780143039853"  # The Au Pairs, The Outsiders (2)
    " 9780064472777 9780786282821 9780060880125 9780060725143 9780060751647"  # Meg
    # Cabot's All-American Girl (2), How to Be Popular, The Mediator (2)
    " 9780440936855 9780739439708 9780440227700 9780440910817 9780440208143"  # L'Engle's
    # O'Keefe, Time and Austin books
)


class Audiences:
    """The audiences of each catalog row (index order), by the module docstring's rules."""

    def __init__(self, books: Sequence[Book], catalog: Path):
        publishers, pages = _metadata(catalog)
        self.texts = [f"{b.title}. {b.description}" for b in books]
        self.marks: list[frozenset[str]] = []
        for b, text in zip(books, self.texts, strict=True):
            publisher = publishers.get(b.id) or ""
            marks = set()
            first = b.authors[0] if b.authors else ""
            if _has(TEEN, text) or _has(TEEN_PUBLISHER, publisher):
                marks.add("teen")
            if first in TEEN_AUTHORS or b.id in FOR_TEENS:
                marks.add("teen")
            if _has(KIDS, text) or _has(KIDS_PUBLISHER, publisher):
                marks.add("kids")
            if first in KIDS_AUTHORS or b.id in FOR_KIDS:
                marks.add("kids")
            if _has(TODDLER, text) and (pages.get(b.id) or TODDLER_PAGES + 1) <= TODDLER_PAGES:
                marks.add("toddler")
            self.marks.append(frozenset() if b.id in FOR_ADULTS else frozenset(marks))

    def holds(self, row: int, audience: str) -> bool:
        """Whether the book is for `audience`: "teen", "kids", "young" (teen or kids),
        "toddler" or "adult"."""
        marks = self.marks[row]
        if audience == "adult":
            return not marks
        if audience == "young":
            return bool(marks & {"teen", "kids"})
        return audience in marks


def _has(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.IGNORECASE) is not None


def _metadata(catalog: Path) -> tuple[dict[str, str | None], dict[str, int | None]]:
    """Each book's publisher and page count, by id."""
    publishers, pages = {}, {}
    with catalog.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            publishers[row["id"]] = row.get("publisher")
            pages[row["id"]] = row.get("num_pages")
    return publishers, pages
