"""What people send besides text: images kept under the workspace and shown to the model, voice
notes and audio turned into text. `store` keeps the files, `intake` prepares a message's media
before its turn runs (`clarity` judges a transcript, `pixels` reads an image file's size), `prompt`
decides which images the next model call carries."""
