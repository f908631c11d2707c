"""Vocabulary of the embedded French clinical demo corpus.

Every term carries the QUAERO / UMLS semantic group it belongs to (``DISO``,
``CHEM``, ``ANAT``, ``PROC``, ``LIVB``, ``PHYS``, ``DEVI``, ``GEOG``, ``OBJC``,
``PHEN``), so that the demo NER tasks use the same label scheme as the real
EMEA and Medline tasks. Tumour terms carry ICD-O-3 morphology codes and sites
carry ICD-O-3 topography codes (codes are real ICD-O-3 codes; the pairing of
terms and codes follows the classification's labels).
"""

from __future__ import annotations

# (term, ICD-10 chapter number 1-22) -- DiaMed-style multiclass label.
DISEASES: list[tuple[str, int]] = [
    ("pneumopathie infectieuse", 10), ("tuberculose pulmonaire", 1), ("paludisme grave", 1),
    ("infection urinaire", 14), ("pyélonéphrite aiguë", 14), ("insuffisance rénale chronique", 14),
    ("diabète de type 2", 4), ("hypothyroïdie", 4), ("maladie de Basedow", 4),
    ("hypertension artérielle", 9), ("infarctus du myocarde", 9), ("embolie pulmonaire", 9),
    ("insuffisance cardiaque", 9), ("fibrillation atriale", 9), ("accident vasculaire cérébral", 9),
    ("épilepsie", 6), ("sclérose en plaques", 6), ("maladie de Parkinson", 6), ("méningite bactérienne", 1),
    ("asthme", 10), ("bronchopneumopathie chronique obstructive", 10), ("pleurésie", 10),
    ("appendicite aiguë", 11), ("cholécystite", 11), ("pancréatite aiguë", 11), ("cirrhose hépatique", 11),
    ("ulcère gastrique", 11), ("maladie de Crohn", 11), ("occlusion intestinale", 11),
    ("polyarthrite rhumatoïde", 13), ("lupus érythémateux disséminé", 13), ("spondylarthrite", 13),
    ("fracture du col du fémur", 19), ("traumatisme crânien", 19), ("brûlure du second degré", 19),
    ("anémie ferriprive", 3), ("thrombopénie", 3), ("drépanocytose", 3),
    ("dépression sévère", 5), ("schizophrénie", 5), ("trouble bipolaire", 5),
    ("psoriasis", 12), ("eczéma atopique", 12), ("érysipèle", 12),
    ("glaucome", 7), ("cataracte", 7), ("otite moyenne aiguë", 8),
    ("prééclampsie", 15), ("grossesse extra-utérine", 15), ("malformation cardiaque congénitale", 17),
]

SYMPTOMS = [
    "fièvre", "toux productive", "dyspnée", "douleur thoracique", "douleur abdominale", "vomissements",
    "céphalées", "asthénie", "amaigrissement", "sueurs nocturnes", "diarrhée", "ictère", "hématurie",
    "œdèmes des membres inférieurs", "palpitations", "vertiges", "convulsions", "confusion",
    "éruption cutanée", "prurit", "arthralgies", "lombalgie", "dysphagie", "hémoptysie", "syncope",
]

DRUGS = [
    "amoxicilline", "ceftriaxone", "ciprofloxacine", "métronidazole", "paracétamol", "ibuprofène",
    "morphine", "tramadol", "héparine", "énoxaparine", "warfarine", "aspirine", "clopidogrel",
    "metformine", "insuline glargine", "lévothyroxine", "furosémide", "ramipril", "amlodipine",
    "bisoprolol", "atorvastatine", "oméprazole", "prednisolone", "méthotrexate", "cisplatine",
    "carboplatine", "paclitaxel", "docétaxel", "5-fluorouracile", "tamoxifène", "létrozole",
    "trastuzumab", "bévacizumab", "rituximab", "imatinib", "valproate de sodium", "lévétiracétam",
    "halopéridol", "sertraline", "salbutamol", "artésunate", "rifampicine", "isoniazide",
]

ANATOMY = [
    "foie", "rein droit", "rein gauche", "poumon droit", "poumon gauche", "cœur", "pancréas",
    "vésicule biliaire", "rate", "estomac", "côlon sigmoïde", "rectum", "vessie", "prostate",
    "utérus", "ovaire gauche", "sein droit", "sein gauche", "thyroïde", "cerveau", "moelle épinière",
    "fémur", "tibia", "genou droit", "épaule gauche", "peau", "ganglions axillaires", "aorte",
]

PROCEDURES = [
    "échographie abdominale", "tomodensitométrie thoracique", "imagerie par résonance magnétique",
    "radiographie du thorax", "électrocardiogramme", "échocardiographie", "biopsie", "coloscopie",
    "fibroscopie œso-gastro-duodénale", "ponction lombaire", "hémocultures", "numération formule sanguine",
    "dosage de la CRP", "scintigraphie osseuse", "TEP-scanner", "cholécystectomie", "appendicectomie",
    "mastectomie", "colectomie", "néphrectomie", "chimiothérapie adjuvante", "radiothérapie",
    "hémodialyse", "intubation", "drainage pleural", "examen anatomopathologique",
]

LIVB = ["patient", "patiente", "enfant", "nourrisson", "homme", "femme", "Plasmodium falciparum",
        "Escherichia coli", "Staphylococcus aureus", "Mycobacterium tuberculosis", "Streptococcus pneumoniae"]

PHYS = ["grossesse", "tension artérielle", "fréquence cardiaque", "glycémie", "diurèse", "saturation en oxygène",
        "ménopause", "croissance"]

DEVICES = ["sonde urinaire", "cathéter veineux central", "pacemaker", "prothèse de hanche", "stent coronaire",
           "chambre implantable"]

GEO = ["Dakar", "Yaoundé", "Abidjan", "Bamako", "Lomé", "Cotonou", "Marseille", "Lyon", "Lille", "Casablanca",
       "Tunis", "Niamey"]

# Tumour morphology: (term, ICD-O-3 morphology code).
MORPHOLOGY: list[tuple[str, str]] = [
    ("adénocarcinome", "8140/3"), ("carcinome épidermoïde", "8070/3"), ("carcinome canalaire infiltrant", "8500/3"),
    ("carcinome lobulaire infiltrant", "8520/3"), ("carcinome à cellules claires", "8310/3"),
    ("carcinome urothélial", "8120/3"), ("mélanome malin", "8720/3"), ("lymphome diffus à grandes cellules B", "9680/3"),
    ("lymphome de Hodgkin", "9650/3"), ("sarcome d'Ewing", "9260/3"), ("ostéosarcome", "9180/3"),
    ("léiomyosarcome", "8890/3"), ("liposarcome", "8850/3"), ("glioblastome", "9440/3"), ("méningiome", "9530/0"),
    ("carcinome hépatocellulaire", "8170/3"), ("tumeur stromale gastro-intestinale", "8936/3"),
    ("carcinome neuroendocrine", "8246/3"), ("adénome", "8140/0"), ("carcinome papillaire", "8260/3"),
    ("carcinome à petites cellules", "8041/3"), ("cystadénocarcinome séreux", "8441/3"),
    ("carcinome médullaire", "8510/3"), ("néphroblastome", "8960/3"), ("myélome multiple", "9732/3"),
    ("mésothéliome malin", "9050/3"), ("carcinome adénoïde kystique", "8200/3"), ("chondrosarcome", "9220/3"),
    ("rhabdomyosarcome", "8900/3"), ("carcinome basocellulaire", "8090/3"), ("leucémie aiguë myéloïde", "9861/3"),
    ("tumeur de Krukenberg", "8490/6"), ("carcinome in situ", "8010/2"), ("métastase", "8000/6"),
]

# Tumour site: (term, ICD-O-3 topography code).
TOPOGRAPHY: list[tuple[str, str]] = [
    ("sein", "C50.9"), ("quadrant supéro-externe du sein", "C50.4"), ("poumon", "C34.9"), ("lobe supérieur du poumon", "C34.1"),
    ("côlon", "C18.9"), ("côlon sigmoïde", "C18.7"), ("rectum", "C20.9"), ("estomac", "C16.9"), ("pancréas", "C25.9"),
    ("foie", "C22.0"), ("rein", "C64.9"), ("vessie", "C67.9"), ("prostate", "C61.9"), ("ovaire", "C56.9"),
    ("col de l'utérus", "C53.9"), ("endomètre", "C54.1"), ("thyroïde", "C73.9"), ("cerveau", "C71.9"),
    ("peau", "C44.9"), ("os long du membre inférieur", "C40.2"), ("ganglion lymphatique", "C77.9"),
    ("œsophage", "C15.9"), ("larynx", "C32.9"), ("cavité buccale", "C06.9"), ("plèvre", "C38.4"),
    ("tissus mous", "C49.9"), ("moelle osseuse", "C42.1"), ("glande parotide", "C07.9"), ("testicule", "C62.9"),
]

DIFFERENTIATION = ["bien différencié", "moyennement différencié", "peu différencié", "indifférencié"]

SPECIALTIES = ["cardiologie", "pneumologie", "gastro-entérologie", "neurologie", "dermatologie",
               "pédiatrie", "gynécologie", "psychiatrie"]

# Terms of each specialty: the specialist referral sentences of corpus case reports.
SPECIALTY_TERMS: dict[str, list[str]] = {
    "cardiologie": ["palpitations", "douleur thoracique", "hypertension artérielle", "bisoprolol", "essoufflement à l'effort"],
    "pneumologie": ["toux productive", "asthme", "salbutamol", "crachats", "dyspnée nocturne"],
    "gastro-entérologie": ["douleur abdominale", "diarrhée", "oméprazole", "brûlures d'estomac", "ballonnements"],
    "neurologie": ["céphalées", "vertiges", "convulsions", "fourmillements dans les mains", "lévétiracétam"],
    "dermatologie": ["éruption cutanée", "prurit", "eczéma atopique", "plaques rouges", "crème à la cortisone"],
    "pédiatrie": ["mon bébé", "fièvre chez mon enfant", "vaccin", "poussée dentaire", "lait infantile"],
    "gynécologie": ["règles douloureuses", "grossesse", "contraception", "pertes blanches", "ménopause"],
    "psychiatrie": ["anxiété", "insomnie", "idées noires", "sertraline", "crises de panique"],
}

# Hospital service of each ICD-10 chapter: corpus case reports (never the task documents) say where
# the patient was admitted, so that pretraining sees each disease beside its chapter's service.
CHAPTER_SERVICES: dict[int, str] = {
    1: "maladies infectieuses", 2: "oncologie", 3: "hématologie", 4: "endocrinologie", 5: "psychiatrie",
    6: "neurologie", 7: "ophtalmologie", 8: "oto-rhino-laryngologie", 9: "cardiologie", 10: "pneumologie",
    11: "gastro-entérologie", 12: "dermatologie", 13: "rhumatologie", 14: "néphrologie", 15: "obstétrique",
    17: "chirurgie pédiatrique", 19: "traumatologie",
}

# The investigations that confirm a diagnosis of each ICD-10 chapter: corpus documents (never the
# task documents) state a diagnosis right after one of its chapter's frames, so that pretraining
# places each disease, held-out ones included, among its chapter's (as a drug among drugs).
CHAPTER_FRAMES: dict[int, list[str]] = {
    1: ["Les hémocultures ont confirmé ", "Le bilan infectieux a conclu à "],
    2: ["L'examen anatomopathologique a confirmé ", "La biopsie a conclu à "],
    3: ["Le myélogramme a confirmé ", "L'hémogramme a conclu à "],
    4: ["Le bilan hormonal a confirmé ", "Le dosage hormonal a conclu à "],
    5: ["L'entretien psychiatrique a conclu à ", "L'évaluation psychiatrique a confirmé "],
    6: ["L'IRM cérébrale a confirmé ", "L'examen neurologique a conclu à "],
    7: ["L'examen ophtalmologique a conclu à ", "Le fond d'œil a confirmé "],
    8: ["L'otoscopie a conclu à ", "L'examen ORL a confirmé "],
    9: ["L'échographie cardiaque a confirmé ", "L'électrocardiogramme a conclu à "],
    10: ["La radiographie thoracique a confirmé ", "Les explorations respiratoires ont conclu à "],
    11: ["L'endoscopie digestive a confirmé ", "Le scanner abdominal a conclu à "],
    12: ["L'examen dermatologique a conclu à ", "La biopsie cutanée a confirmé "],
    13: ["Le bilan rhumatologique a conclu à ", "Les radiographies articulaires ont confirmé "],
    14: ["L'échographie rénale a confirmé ", "Le bilan urinaire a conclu à "],
    15: ["L'échographie obstétricale a confirmé ", "Le suivi de grossesse a conclu à "],
    17: ["L'échographie fœtale a confirmé ", "Le bilan néonatal a conclu à "],
    19: ["Le bilan traumatologique a conclu à ", "La radiographie osseuse a confirmé "],
}


def held_out(items: list, part: str | None) -> list:
    """The part of a vocabulary list used by one split of the demo tasks.

    Every third item (index ``i % 3 == 2``) is held out of the tasks' train
    split: ``part="train"`` returns the others, ``part="eval"`` (dev and
    test) the held-out ones, ``None`` (the pretraining corpus) all of them.
    So dev/test documents use corpus vocabulary that the small train split
    never shows: a model can only place it through what pretraining taught.
    """
    if part is None:
        return items
    if part not in ("train", "eval"):
        raise ValueError(f"vocabulary part must be 'train', 'eval' or None, got {part!r}")
    return [x for i, x in enumerate(items) if (i % 3 == 2) == (part == "eval")]


def abbreviation(term: str) -> str:
    """Clinical-style abbreviation of a tumour morphology term (``carcinome canalaire infiltrant`` -> ``CARCANINF``).

    The first three letters of each word of 3+ letters, or the first seven
    of a one-word term, without accents, upper-cased (``ostéosarcome`` -> ``OSTEOSA``);
    unique over :data:`MORPHOLOGY` (checked at import).
    """
    import unicodedata

    plain = "".join(c for c in unicodedata.normalize("NFD", term) if unicodedata.category(c) != "Mn")
    words = [w for w in plain.replace("'", " ").replace("-", " ").split() if len(w) >= 3]
    return ("".join(w[:3] for w in words) if len(words) > 1 else words[0][:7]).upper()


MORPHOLOGY_ABBREVIATIONS: dict[str, str] = {t: abbreviation(t) for t, _ in MORPHOLOGY}
if len(set(MORPHOLOGY_ABBREVIATIONS.values())) != len(MORPHOLOGY_ABBREVIATIONS):
    raise AssertionError("morphology abbreviations are not unique")
