"""Deterministic generator of the embedded French clinical demo corpus.

The demo must behave like real text for the pipeline's purposes: varied
sentences (many templates, many slot values, random section order and length)
so that CLM and MLM losses fall measurably, and annotations (entity spans,
document labels) so that the demo evaluation tasks are learnable. Everything
is driven by one ``random.Random`` seeded by the caller: the same seed gives
byte-identical output on every machine.

Public API:
    generate_case(rng)      -> DemoDocument  clinical case report (oncology with probability 0.4)
    generate_abstract(rng)  -> DemoDocument  scientific-abstract-style text
    generate_leaflet(rng)   -> DemoDocument  drug leaflet section
    generate_title(rng)     -> DemoDocument  one MEDLINE-style title (5-15 words)
    generate_dialogue(rng)  -> DemoDocument  patient question + doctor answer, labelled by the topic asked about
    generate_corpus(n_documents, seed) -> list[dict]  mixed corpus rows {"text", "source", "doc_id"}
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field

from clmdetour.demo import vocabulary as V

_PART: str | None = None  # vocabulary part in use (clmdetour.demo.vocabulary.held_out); None = the corpus


@contextmanager
def vocabulary_part(part: str | None):
    """Generate documents of one demo-task split: ``"train"``, ``"eval"`` (dev/test) or ``None`` (corpus).

    Inside, label-bearing terms (diseases, symptoms, drugs, anatomy,
    procedures, places, devices, dialogue terms) come from
    :func:`clmdetour.demo.vocabulary.held_out`'s part; tumour morphologies are
    written in full in ``"train"`` and as their abbreviation in ``"eval"``;
    the corpus-only sentences (hospital service, specialist referral) are
    left out of both task parts. So dev/test use words that the tasks'
    train split never shows, and only pretraining on the corpus relates them
    to the labels.
    """
    global _PART
    V.held_out([], part)  # validates the name
    previous, _PART = _PART, part
    try:
        yield
    finally:
        _PART = previous


def _pool(items: list) -> list:
    return V.held_out(items, _PART)


def _morphology_surface(rng: random.Random, term: str) -> tuple[str, str]:
    """(entity text, text after it) of a tumour morphology: full name, abbreviation, or both (corpus)."""
    abbr = V.MORPHOLOGY_ABBREVIATIONS[term]
    if _PART == "train":
        return term, ""
    if _PART == "eval":
        return abbr, ""
    u = rng.random()
    return (term, "") if u < 0.4 else (abbr, "") if u < 0.7 else (term, f" ({abbr})")


@dataclass
class DemoDocument:
    """A generated document with its annotations.

    Attributes:
        text: the document text (str).
        entities: list of ``(start, end, group)`` character spans (end exclusive)
            with a QUAERO semantic group (``DISO``, ``CHEM`` ...). Spans never overlap.
        labels: document labels: ``chapter`` (int, ICD-10 chapter 1-22),
            ``morphology`` / ``topography`` (lists of ICD-O-3 codes), ``topic`` (str, dialogues).
    """

    text: str = ""
    entities: list[tuple[int, int, str]] = field(default_factory=list)
    labels: dict = field(default_factory=dict)

    def add(self, text: str) -> DemoDocument:
        """Append plain text."""
        self.text += text
        return self

    def ent(self, text: str, group: str) -> DemoDocument:
        """Append ``text`` and record it as an entity of ``group``."""
        start = len(self.text)
        self.text += text
        self.entities.append((start, len(self.text), group))
        return self


def _age_sex(rng: random.Random, doc: DemoDocument) -> None:
    sex = rng.choice(["M", "F"])
    age = rng.randint(1, 89)
    if age < 3:
        doc.add(rng.choice(["Il s'agit d'un ", "Nous rapportons le cas d'un "])).ent("nourrisson", "LIVB")
        doc.add(f" de {rng.randint(2, 30)} mois")
    elif age < 15:
        doc.add(rng.choice(["Il s'agit d'un ", "Nous rapportons le cas d'un ", "Un "])).ent("enfant", "LIVB")
        doc.add(f" de {age} ans")
    else:
        noun = "patient" if sex == "M" else "patiente"
        art = "un" if sex == "M" else "une"
        doc.add(rng.choice([f"Il s'agit d'{art} ", f"Nous rapportons le cas d'{art} ", f"{art.capitalize()} "]))
        doc.ent(noun, "LIVB").add(f" âgé{'e' if sex == 'F' else ''} de {age} ans")
    if rng.random() < 0.5:
        doc.add(", originaire de ").ent(rng.choice(_pool(V.GEO)), "GEOG")
    doc.add(rng.choice([", ", " "]))


def _history(rng: random.Random, doc: DemoDocument) -> None:
    if rng.random() < 0.3:
        doc.add(rng.choice(["sans antécédent particulier", "sans antécédents pathologiques notables"]))
        return
    doc.add(rng.choice(["aux antécédents de ", "suivi pour ", "connu pour ", "ayant comme antécédent "]))
    picks = rng.sample(_pool(V.DISEASES), rng.randint(1, 2))
    for i, (term, _) in enumerate(picks):
        if i:
            doc.add(rng.choice([" et ", ", "]))
        doc.ent(term, "DISO")
    if rng.random() < 0.5:
        doc.add(rng.choice([" traité par ", " sous ", " équilibré sous "])).ent(rng.choice(_pool(V.DRUGS)), "CHEM")


def _symptoms(rng: random.Random, doc: DemoDocument) -> None:
    doc.add(rng.choice([
        ", admis pour ", ", hospitalisé pour ", ", qui consulte pour ", ", adressé aux urgences pour ",
        ". Il présente depuis quelques jours ", ". Le motif de consultation était ",
    ]))
    picks = rng.sample(_pool(V.SYMPTOMS), rng.randint(1, 3))
    for i, term in enumerate(picks):
        if i:
            doc.add(" et " if i == len(picks) - 1 else ", ")
        doc.ent(term, "DISO")
    doc.add(rng.choice([
        f" évoluant depuis {rng.randint(2, 30)} jours. ", f" depuis {rng.randint(1, 6)} semaines. ",
        ". ", " d'installation progressive. ", " associée à une altération de l'état général. ",
    ]))


def _exam(rng: random.Random, doc: DemoDocument) -> None:
    choice = rng.randint(0, 3)
    if choice == 0:
        doc.add("À l'examen, la ").ent("tension artérielle", "PHYS").add(
            f" était de {rng.randint(9, 18)}/{rng.randint(5, 10)} cmHg et la ").ent("fréquence cardiaque", "PHYS").add(
            f" de {rng.randint(55, 130)} battements par minute. ")
    elif choice == 1:
        doc.add(f"La température était à {rng.randint(365, 405) / 10:.1f} °C. ".replace(".", ",", 1))
    elif choice == 2:
        doc.add("L'examen clinique retrouvait une sensibilité ").add(rng.choice(["du ", "au niveau du "])).ent(
            rng.choice(_pool(V.ANATOMY)), "ANAT").add(". ")
    else:
        doc.add("La ").ent("saturation en oxygène", "PHYS").add(f" était de {rng.randint(82, 99)} %. ")


def _investigations(rng: random.Random, doc: DemoDocument) -> None:
    for _ in range(rng.randint(1, 3)):
        proc = rng.choice(_pool(V.PROCEDURES[:14]))
        template = rng.randint(0, 3)
        if template == 0:
            doc.add(rng.choice(["L'", "Une ", "La "]) if proc[0] in "aeéiou" else "La ").ent(proc, "PROC").add(
                rng.choice([" a montré ", " objectivait ", " mettait en évidence "]))
            doc.add(rng.choice(["une lésion ", "un épaississement ", "une masse ", "des anomalies "]))
            doc.add(rng.choice(["du ", "au niveau du ", "intéressant le "])).ent(rng.choice(_pool(V.ANATOMY)), "ANAT").add(". ")
        elif template == 1:
            doc.add("Le bilan comprenant une ").ent(proc, "PROC").add(rng.choice([
                " était normal. ", " était sans particularité. ", " revenait perturbé. "]))
        elif template == 2:
            doc.add("On a réalisé une ").ent(proc, "PROC").add(" qui ").add(rng.choice([
                "confirmait le diagnostic. ", "était non contributive. ", "orientait vers une origine infectieuse. "]))
        else:
            doc.add(f"La biologie retrouvait une hyperleucocytose à {rng.randint(11, 25)} 000/mm3 et une ").ent(
                "glycémie", "PHYS").add(f" à {rng.randint(6, 30) / 10:.1f} g/L. ".replace(".", ",", 1))


def _treatment(rng: random.Random, doc: DemoDocument) -> None:
    doc.add(rng.choice(["Le patient a été mis sous ", "Un traitement par ", "Il a bénéficié d'un traitement par ",
                        "La prise en charge a consisté en "]))
    drugs = rng.sample(_pool(V.DRUGS), rng.randint(1, 2))
    for i, d in enumerate(drugs):
        if i:
            doc.add(" associé à ")
        doc.ent(d, "CHEM")
    if rng.random() < 0.4:
        doc.add(" avec pose d'un ").ent(rng.choice(_pool(V.DEVICES)), "DEVI")
    doc.add(rng.choice([" a été instauré. ", ". ", " pendant dix jours. ", " par voie intraveineuse. "]))
    doc.add(rng.choice([
        "L'évolution était favorable. ", "L'évolution a été marquée par une amélioration clinique. ",
        "Le patient est décédé au dixième jour d'hospitalisation. ", "Les suites étaient simples. ",
        f"Le recul est de {rng.randint(2, 36)} mois sans récidive. ",
    ]))


def _oncology(rng: random.Random, doc: DemoDocument) -> None:
    morph_term, morph_code = rng.choice(V.MORPHOLOGY)
    topo_term, topo_code = rng.choice(V.TOPOGRAPHY)
    doc.labels["morphology"] = [morph_code]
    doc.labels["topography"] = [topo_code]
    doc.add(rng.choice(["L'", "Une "])).ent("examen anatomopathologique", "PROC").add(
        rng.choice([" de la pièce opératoire ", " de la biopsie ", " "]))
    surface, after = _morphology_surface(rng, morph_term)
    doc.add(rng.choice(["concluait à un ", "a mis en évidence un ", "était en faveur d'un "])).ent(surface, "DISO").add(after)
    if rng.random() < 0.6:
        doc.add(" " + rng.choice(V.DIFFERENTIATION))
    doc.add(rng.choice([" du ", " de la ", " localisé au niveau du "])).ent(topo_term, "ANAT").add(". ")
    if rng.random() < 0.35:
        m2_term, m2_code = rng.choice(V.MORPHOLOGY[-4:])
        t2_term, t2_code = rng.choice(V.TOPOGRAPHY)
        doc.labels["morphology"].append(m2_code)
        doc.labels["topography"].append(t2_code)
        doc.add("Le bilan d'extension retrouvait une ").ent(_morphology_surface(rng, m2_term)[0], "DISO").add(" au niveau du ").ent(t2_term, "ANAT").add(". ")
    doc.add(rng.choice(["Une ", "Le patient a reçu une "])).ent(
        rng.choice(["chimiothérapie adjuvante", "radiothérapie", "chimiothérapie néoadjuvante"]), "PROC").add(" à base de ").ent(
        rng.choice(V.DRUGS[24:34]), "CHEM").add(". ")


def generate_case(rng: random.Random, oncology: bool | None = None) -> DemoDocument:
    """A clinical case report; by default 40 % are oncology cases with ICD-O-3 labels.

    The diagnosis is stated early (after the history and presenting symptoms),
    so that fine-tuning can truncate: with the demo's 2,048-token vocabulary the
    last disease or symptom term ends by token 54 in 3 cases of 4 and by token
    71 in 19 of 20 (measured on 300 cases), while whole cases run 90-130 tokens.

    Args:
        rng: the random generator.
        oncology: force (True) or forbid (False) an oncology case; None = 40 % chance.

    Labels: ``chapter`` (ICD-10 chapter of the main diagnosis; 2 for tumours),
    ``morphology`` and ``topography`` (ICD-O-3 codes, empty unless oncology).
    """
    doc = DemoDocument(labels={"morphology": [], "topography": []})
    _age_sex(rng, doc)
    _history(rng, doc)
    _symptoms(rng, doc)
    if oncology if oncology is not None else rng.random() < 0.4:
        _oncology(rng, doc)
        doc.labels["chapter"] = 2
    else:
        term, chapter = rng.choice(_pool(V.DISEASES))
        lead, tail = rng.choice([("Le diagnostic de ", " a été retenu. "), ("Le diagnostic retenu était celui de ", ". "),
                                 ("On a posé le diagnostic de ", ". "), ("Le tableau était compatible avec ", ". ")])
        if _PART is None and rng.random() < 0.8:  # corpus only: the chapter's investigation states it
            lead, tail = rng.choice(V.CHAPTER_FRAMES[chapter]), ". "
        doc.add(lead).ent(term, "DISO").add(tail)
        doc.labels["chapter"] = chapter
    if _PART is None:  # corpus only: where the patient was admitted, and a specialist referral
        doc.add(rng.choice(["Il a été hospitalisé dans le service de ", "Admission en ", "Le patient a été transféré en "]))
        doc.add(V.CHAPTER_SERVICES[doc.labels["chapter"]] + ". ")
        specialty = rng.choice(V.SPECIALTIES)
        doc.add(rng.choice(["Un avis en ", "Il a été adressé en consultation de ", "Une consultation de "]))
        doc.add(f"{specialty} a été demandé pour {rng.choice(V.SPECIALTY_TERMS[specialty])}. ")
    sections = [_exam, _investigations]
    rng.shuffle(sections)
    for section in sections[: rng.randint(1, 2)]:
        section(rng, doc)
    _treatment(rng, doc)
    doc.text = doc.text.strip()
    return doc


def generate_abstract(rng: random.Random) -> DemoDocument:
    """A scientific-abstract-style text (objective, methods, results, conclusion)."""
    doc = DemoDocument()
    term, chapter = rng.choice(_pool(V.DISEASES))
    drug = rng.choice(_pool(V.DRUGS))
    doc.labels["chapter"] = chapter
    doc.add(rng.choice(["Objectif : ", "Introduction : ", "Contexte : "]))
    doc.add(rng.choice(["évaluer l'efficacité de ", "étudier la tolérance de ", "décrire l'utilisation de "])).ent(drug, "CHEM")
    doc.add(" dans le traitement de ").ent(term, "DISO").add(". ")
    doc.add(rng.choice(["Méthodes : ", "Patients et méthodes : "]))
    doc.add(f"étude {rng.choice(['rétrospective', 'prospective', 'multicentrique', 'randomisée'])} incluant {rng.randint(20, 900)} ")
    doc.ent(rng.choice(["patients", "patientes", "enfants"]), "LIVB").add(" suivis à ").ent(rng.choice(_pool(V.GEO)), "GEOG")
    doc.add(f" entre {rng.randint(1995, 2015)} et {rng.randint(2016, 2023)}. ")
    doc.add("Résultats : ")
    doc.add(f"l'âge moyen était de {rng.randint(18, 75)} ans. ")
    if _PART is None:  # corpus only: the chapter's investigation states the diagnosis
        doc.add(rng.choice(V.CHAPTER_FRAMES[chapter])).ent(term, "DISO").add(" chez tous les patients inclus. ")
    doc.add(rng.choice(["Une réponse complète a été observée chez ", "Une amélioration a été notée chez ",
                        "Des effets indésirables sont survenus chez "]))
    doc.add(f"{rng.randint(5, 95)} % des cas")
    if rng.random() < 0.5:
        doc.add(", principalement des ").ent(rng.choice(_pool(V.SYMPTOMS)), "DISO")
    doc.add(". ")
    if rng.random() < 0.5:
        doc.add("La ").ent(rng.choice(_pool(V.PROCEDURES)), "PROC").add(" a été réalisée chez tous les patients. ")
    doc.add("Conclusion : ").ent(drug, "CHEM").add(rng.choice([
        " constitue une option thérapeutique efficace. ", " doit être utilisé avec prudence. ",
        " améliore le pronostic de ces patients. ", " nécessite des études complémentaires. "]))
    doc.text = doc.text.strip()
    return doc


def generate_leaflet(rng: random.Random) -> DemoDocument:
    """A drug-leaflet section (indications, dosage, side effects)."""
    doc = DemoDocument()
    drug = rng.choice(_pool(V.DRUGS))
    doc.ent(drug.capitalize(), "CHEM").add(f" {rng.choice([5, 10, 20, 40, 100, 250, 500])} mg, ")
    doc.add(rng.choice(["comprimé pelliculé", "solution injectable", "gélule", "poudre pour solution buvable"]) + ". ")
    doc.add("Indications thérapeutiques : ce médicament est indiqué dans le traitement de ")
    doc.ent(rng.choice(_pool(V.DISEASES))[0], "DISO").add(rng.choice([" chez l'adulte. ", " chez l'adulte et l'enfant de plus de 6 ans. ", ". "]))
    if rng.random() < 0.5:
        doc.add("Voie d'administration : ").add(rng.choice(["application sur la ", "injection dans le ", "instillation dans l'"]))
        doc.ent(rng.choice(["peau", "muscle deltoïde", "œil", "cuisse", "abdomen"]), "ANAT").add(". ")
    doc.add("Posologie : ").add(rng.choice([
        f"un comprimé {rng.randint(1, 3)} fois par jour. ", f"{rng.randint(1, 4)} g par jour en deux prises. ",
        "la dose doit être adaptée à la fonction rénale. "]))
    doc.add("Effets indésirables fréquents : ")
    effects = rng.sample(_pool(V.SYMPTOMS), rng.randint(2, 4))
    for i, e in enumerate(effects):
        if i:
            doc.add(", ")
        doc.ent(e, "DISO")
    doc.add(". ")
    if rng.random() < 0.5:
        doc.add("Ne pas utiliser pendant la ").ent("grossesse", "PHYS").add(". ")
    if rng.random() < 0.4:
        doc.add("Conserver le ").ent("flacon", "OBJC").add(" à l'abri de la lumière. ")
    doc.text = doc.text.strip()
    return doc


def generate_title(rng: random.Random) -> DemoDocument:
    """A short MEDLINE-style title."""
    doc = DemoDocument()
    t = rng.randint(0, 4)
    if t == 0:
        doc.ent(rng.choice(_pool(V.DISEASES))[0].capitalize(), "DISO").add(" révélée par ").ent(rng.choice(_pool(V.SYMPTOMS)), "DISO")
    elif t == 1:
        doc.add("Intérêt de la ").ent(rng.choice(_pool(V.PROCEDURES)), "PROC").add(" dans le diagnostic de ").ent(rng.choice(_pool(V.DISEASES))[0], "DISO")
    elif t == 2:
        doc.add("Traitement de ").ent(rng.choice(_pool(V.DISEASES))[0], "DISO").add(" par ").ent(rng.choice(_pool(V.DRUGS)), "CHEM")
    elif t == 3:
        term, _ = rng.choice(V.MORPHOLOGY)
        doc.ent(term.capitalize(), "DISO").add(" du ").ent(rng.choice(V.TOPOGRAPHY)[0], "ANAT").add(" : à propos d'un cas")
    else:
        doc.add("Infection à ").ent(rng.choice(V.LIVB[6:]), "LIVB").add(" chez l'").ent(rng.choice(["enfant", "adulte"]), "LIVB").add(
            " à ").ent(rng.choice(_pool(V.GEO)), "GEOG")
    return doc


# The topics of the demo dialogues: label -> vocabulary list of the term asked about. Every topic's
# terms fill their own slots in the corpus (a drug after "traitement par", an exam after "Intérêt de
# la", a town after "suivis à" ...), while the dialogue frames below are the same for every topic.
DIALOGUE_TOPICS: dict[str, list[str]] = {
    "maladie": [t for t, _ in V.DISEASES], "symptôme": V.SYMPTOMS, "médicament": V.DRUGS,
    "examen": V.PROCEDURES, "anatomie": V.ANATOMY, "lieu": V.GEO,
}


def topic_term(rng: random.Random) -> tuple[str, str]:
    """``(topic, term)``: a topic of :data:`DIALOGUE_TOPICS` drawn uniformly, then one of its terms
    from the vocabulary part in use (:func:`vocabulary_part`: held-out terms in dev/test)."""
    topic = rng.choice(list(DIALOGUE_TOPICS))
    return topic, rng.choice(_pool(DIALOGUE_TOPICS[topic]))


def generate_problem_list(rng: random.Random) -> DemoDocument:
    """A clinical note's problem list of one or two terms; ``labels['topics']`` (sorted) is the label set.

    Each term's topic is drawn independently (:func:`topic_term`) and the
    frames are the same for every topic, so only the terms tell the labels;
    in dev/test they are held-out terms, which only pretraining relates to
    their topic (as for :func:`generate_dialogue`).
    """
    picks = [topic_term(rng) for _ in range(rng.randint(1, 2))]
    doc = DemoDocument(labels={"topics": sorted({topic for topic, _ in picks})})
    doc.add(rng.choice(["Problèmes relevés : ", "Liste des problèmes : ", "Au total : ", "Points à revoir : "]))
    doc.add(" ; ".join(term for _, term in picks))
    doc.add(rng.choice([".", ". À revoir en consultation.", ". Courrier au médecin traitant.", ". Dossier complet."]))
    return doc


def generate_admission(rng: random.Random) -> DemoDocument:
    """The reason for an admission, in one term; ``labels['topic']`` is the class.

    The same construction as :func:`generate_dialogue` (a topic-independent
    frame around one term of a topic, held-out terms in dev/test), written as
    an admission note.
    """
    topic, term = topic_term(rng)
    doc = DemoDocument(labels={"topic": topic})
    doc.add(rng.choice(["Motif d'admission : ", "Motif de consultation : ", "Hospitalisation motivée par : ",
                        "Adressé aux urgences pour : "]))
    doc.add(term)
    doc.add(rng.choice([". Examen clinique à l'entrée sans particularité.", ". Bilan en cours.",
                        ". Sortie prévue après avis médical.", ". Surveillance simple."]))
    return doc


def generate_dialogue(rng: random.Random) -> DemoDocument:
    """A patient question and a doctor's answer; ``labels['topic']`` is the class.

    The topic is the vocabulary list (:data:`DIALOGUE_TOPICS`) of the one
    term the patient asks about; the question and answer frames are drawn
    independently of it, so the frame says nothing about the label. In the
    dev/test part the term is one the task's train split never shows
    (:func:`vocabulary_part`): only what pretraining on the corpus taught
    about the term (which slots it fills) tells its topic.
    """
    topic, term = topic_term(rng)
    doc = DemoDocument(labels={"topic": topic})
    doc.add(rng.choice(["Bonjour docteur, ", "Bonjour, ", "Docteur, ", "Madame, "]))
    doc.add(rng.choice(["j'ai une question sur ", "que pensez-vous de ", "mon médecin m'a parlé de ",
                        "je voudrais des informations sur ", "pouvez-vous m'expliquer "]))
    doc.add(term)
    doc.add(rng.choice([". Est-ce grave ? ", ". Que dois-je faire ? ", " ? Merci. ", ". Faut-il consulter ? "]))
    doc.add("Réponse : " + rng.choice([
        "il faut en parler à votre médecin traitant", "je vous conseille un examen clinique",
        "c'est une question fréquente", "il est préférable de faire un bilan"]))
    doc.add(rng.choice([" rapidement.", ".", " dans les prochains jours."]))
    return doc


_SOURCES = [("clinical_cases", generate_case, 0.5), ("scientific_articles", generate_abstract, 0.3),
            ("drug_leaflets", generate_leaflet, 0.2)]


def generate_corpus(n_documents: int, seed: int) -> list[dict]:
    """A mixed demo pretraining corpus.

    Args:
        n_documents: number of documents (rows) to generate.
        seed: random seed; equal seeds give identical rows.

    Returns:
        ``n_documents`` dicts ``{"text", "source", "doc_id"}`` with ``source`` in
        ``clinical_cases`` (50 %), ``scientific_articles`` (30 %), ``drug_leaflets`` (20 %).

    Raises:
        ValueError: if ``n_documents`` is not positive.
    """
    if n_documents <= 0:
        raise ValueError(f"n_documents must be positive, got {n_documents}")
    rng = random.Random(seed)
    rows = []
    names = [s[0] for s in _SOURCES]
    weights = [s[2] for s in _SOURCES]
    fns = {s[0]: s[1] for s in _SOURCES}
    for i in range(n_documents):
        source = rng.choices(names, weights)[0]
        doc = fns[source](rng)
        rows.append({"text": doc.text, "source": source, "doc_id": f"demo-{seed}-{i:06d}"})
    return rows
